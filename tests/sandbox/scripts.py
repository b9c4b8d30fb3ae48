"""Programs the sandbox tests run inside sandboxes."""

# Starts up to 200 processes; prints how many it got and the errno that stopped it (None: none did).
FORK_BOMB = (
    "import subprocess\n"
    "procs, error = [], None\n"
    "try:\n"
    "    for _ in range(200):\n"
    "        procs.append(subprocess.Popen(['sleep', '30']))\n"
    "except OSError as e:\n"
    "    error = e.errno\n"
    "print(len(procs), error)\n"
    "for p in procs: p.kill()\n"
)

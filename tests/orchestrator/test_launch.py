"""How a harness launch is adapted to a sandbox image that carries the harness CLI on PATH."""

from __future__ import annotations

from clawgym.harnesses.base import RunContext
from clawgym.harnesses.registry import get_harness
from clawgym.orchestrator.attempt import from_image

CTX = RunContext(workdir="/workspace", home="/root", proxy_url="http://127.0.0.1:8080", token="t", model="m")


def test_an_installed_cli_is_called_by_name_in_an_image_instead_of_by_its_host_cache_path():
    adapter = get_harness("claude-code")
    launch = adapter.launch("do it", CTX)
    assert launch.argv[0] == adapter.executable(), "locally the cached install is run by its path"
    pod = from_image(adapter, launch)
    assert pod.argv == ("claude", *launch.argv[1:]), f"in an image the CLI on PATH runs: {pod.argv[:2]}"
    assert pod.env == launch.env and pod.files == launch.files, "only the executable changes"


def test_harnesses_without_an_install_run_unchanged_in_an_image():
    adapter = get_harness("reference")
    launch = adapter.launch("do it", CTX)
    assert from_image(adapter, launch) == launch, "the reference agent travels as a file; nothing to rename"

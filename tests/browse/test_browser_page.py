"""The rollout browser in a real headless Chromium (Debian's `chromium` and `chromium-driver`, installed
by .ci/run), served by the real `clawgym browse` on a run folder holding rollouts captured through the
real proxy from the real torch engine on tiny-qwen3 (real tokens, logprobs and versions). The page
must show a rollout's tree as the store holds it, a failed rollout's verifier output and harness
stderr, a run's steps as a table and its evaluation runs under it, and injected markup as text."""

import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import httpx
import pytest

from clawgym.inference.torch_engine import TorchEngine
from clawgym.store.sql import SqlStore
from clawgym.trajectory.view import rollout_view
from clawgym_app.runtime.services import free_port
from tests.engines import require_engine
from tests.export.capture import HARNESS_STDERR, HOSTILE, CapturedRun, capture_run, record_evaluations

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
pytestmark = pytest.mark.slow
CLAWGYM = str(Path(sys.executable).with_name("clawgym"))
STEP_METRICS = {"loss": 0.0, "reward": 0.5, "pass_rate": 0.5, "trained_groups": ["g"], "tokens_per_s": 812.25}


class Page(HTMLParser):
    """The elements of a dumped DOM: (tag, attrs) in document order, and the text of each element id."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict]] = []
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.elements.append((tag, dict(attrs)))

    def having(self, tag: str = "", **attrs: str) -> list[dict]:
        return [a for t, a in self.elements if (not tag or t == tag) and all(a.get(k) == v for k, v in attrs.items())]

    def with_class(self, name: str) -> list[dict]:
        return [a for _, a in self.elements if name in (a.get("class") or "").split()]


@pytest.fixture(scope="module", autouse=True)
def chromium() -> str:
    """Every test here needs Debian's chromium: skipped without it, failed under CI (`tests.engines`).
    Autouse, so it runs before `served` captures a rollout for nothing."""
    if CHROMIUM is None:
        require_engine("needs Debian's chromium (apt-get install chromium, .ci/run)")
    return CHROMIUM


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[tuple[str, CapturedRun, SqlStore]]:
    """`clawgym browse` on a run folder (runs/<ts>/clawgym.db) with the captured run, two train steps and
    two evaluation runs of it; yields its URL."""
    run_dir = tmp_path_factory.mktemp("runs") / "20260101-000000"
    run_dir.mkdir()
    store = SqlStore(f"sqlite:///{run_dir / 'clawgym.db'}")
    run = capture_run(store, TorchEngine.from_spec("tiny-qwen3", max_batch=4))
    for step in (1, 2):
        store.record_train_step(run.run_id, step, STEP_METRICS | {"version": step, "loss": step / 8})
    record_evaluations(store, run.run_id)
    port = free_port()
    server = subprocess.Popen(
        [CLAWGYM, "browse", "--run-dir", str(run_dir), "--port", str(port), "--model", "tiny-qwen3"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 120
    while True:
        try:
            httpx.get(url + "api/runs", timeout=2).raise_for_status()
            break
        except httpx.HTTPError:
            assert server.poll() is None, f"clawgym browse exited: {server.stdout.read()}"
            assert time.monotonic() < deadline, "clawgym browse did not start in 120 s"
            time.sleep(0.3)
    yield url, run, store
    server.terminate()
    server.wait(timeout=30)
    store.close()


def dump_dom(url: str, *flags: str) -> Page:
    """The DOM after the page's script ran (its fetches included), as headless Chromium serialises it."""
    done = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--virtual-time-budget=15000", *flags, "--dump-dom", url],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return Page(done.stdout), done.stdout


def test_the_page_shows_a_captured_rollouts_tree_and_injected_markup_as_text(served) -> None:
    url, run, store = served
    rollout_id = run.rollout_ids[1]  # the compacted one: a branch
    view = rollout_view(store.list_calls(rollout_id), store.get_rollout(rollout_id))
    page, html = dump_dom(f"{url}#/rollout/{rollout_id}")
    assert page.having("section", id="page")[0].get("data-loaded") == "rollout", html[-3000:]

    nodes = page.with_class("node")
    assert len(nodes) == len(view["nodes"]) == 3, "one list item per tree node"
    assert [n["data-calls"] for n in nodes] == ["0,1", "0", "1"], "node 0 is shared by both calls, then a branch"
    assert len(page.with_class("branch")) == 2, "the two children of the branch point are marked"
    generated = [a for a in page.with_class("span-generated") if a.get("data-kind")]  # not the legend
    assert [g["data-call"] for g in generated] == ["0", "1"], "each call's output is coloured as generated"
    assert len(page.having("span", **{"data-kind": "shared"})) == 1, "the reused prefix is one shared span"
    assert len(page.having("span", **{"data-kind": "prompt"})) == 2, "each branch starts with its own context"
    tokens = page.with_class("tok")
    assert len(tokens) == view["stats"]["trainable_tokens"], "one hoverable element per generated token"
    first = view["nodes"][1]["logprobs"][view["nodes"][1]["spans"][1]["start"]]
    assert tokens[0]["title"] == f"logprob {round(first, 4):g} · version 0 · T 0.7 · call 0", tokens[0]
    assert page.having("tr", **{"class": "call-row", "data-call": "1"}), "the calls table lists call 1"

    # The hostile user message: its text is on the page, escaped, and nothing of it became an element.
    assert "Fix the bug in a.py &lt;script&gt;document.title=\"pwned\"&lt;/script&gt;&lt;img src=x" in html
    assert page.having("img") == [], "an <img onerror> in a message must not become an element"
    assert page.having("script") == [{"src": "static/browse.js"}], "no script but the page's own"
    assert "<title>clawgym rollouts</title>" in html, "the injected script did not run"


def test_the_run_page_lists_groups_and_rollouts_with_rewards(served) -> None:
    url, run, _ = served
    page, html = dump_dom(f"{url}#/run/{run.run_id}")
    assert page.having("section", id="page")[0].get("data-loaded") == "run", html[-3000:]
    assert len(page.with_class("group")) == 1 and len(page.with_class("rollout-row")) == 2
    links = [a["href"] for a in page.having("a") if a.get("href", "").startswith("#/rollout/")]
    assert links == [f"#/rollout/{r}" for r in run.rollout_ids], "each rollout links to its tree"
    assert "group <code>" in html and "2 rollouts · complete · not trained yet" in html


def test_a_failed_rollouts_page_shows_its_verifier_output_and_harness_stderr_as_text(served) -> None:
    """Why the rollout got reward 0: what the verifier printed and the end of the harness's stderr,
    each in its own block, markup in them shown as text."""
    url, run, _ = served
    page, html = dump_dom(f"{url}#/rollout/{run.rollout_ids[1]}")
    assert page.having("section", id="page")[0].get("data-loaded") == "rollout", html[-3000:]
    assert page.having("pre", id="verifier-output") and page.having("pre", id="harness-stderr"), html[-3000:]
    verifier = html.split('id="verifier-output"', 1)[1].split("</pre>", 1)[0]
    assert "0/1 tests passed\nFAILED tests/test_a.py::test_f - assert 1 == 2 &lt;script&gt;" in verifier, verifier
    stderr = html.split('id="harness-stderr"', 1)[1].split("</pre>", 1)[0]
    assert "RuntimeError: gave up &lt;script&gt;" in stderr, stderr
    assert HARNESS_STDERR.splitlines()[0] in stderr and page.having("img") == [], "text only, no element"
    passed, _ = dump_dom(f"{url}#/rollout/{run.rollout_ids[0]}")
    assert not passed.having("pre", id="verifier-output"), "nothing recorded, no empty block"


def test_the_run_page_shows_its_steps_as_a_table_and_its_evaluation_runs(served) -> None:
    url, run, _ = served
    page, html = dump_dom(f"{url}#/run/{run.run_id}")
    assert page.having("section", id="page")[0].get("data-loaded") == "run", html[-3000:]
    steps = html.split("<h3>steps</h3>", 1)[1].split("</table>", 1)[0]
    headers = [h.split("</th>")[0] for h in steps.split("<th>")[1:]]
    assert headers == ["step", "loss", "reward", "pass_rate", "tokens_per_s", "at"], headers
    assert [r["data-step"] for r in page.with_class("step-row")] == ["1", "2"]
    assert "<td>0.125</td><td>0.5</td><td>0.5</td><td>812.25</td>" in steps, "a cell per metric"
    evaluations = page.with_class("eval-row")
    assert len(evaluations) == 2, "the run's own evaluation and the later clawgym eval of it"
    table = html.split("<h3>evaluations</h3>", 1)[1].split("</table>", 1)[0]
    assert "<th>reference Pass@1</th>" in table and "<td>0.25</td>" in table and "<td>0.75</td>" in table


def test_the_runs_page_lists_evaluation_runs_under_the_run_they_evaluated(served) -> None:
    url, run, store = served
    page, html = dump_dom(url)
    assert page.having("section", id="page")[0].get("data-loaded") == "runs", html[-3000:]
    rows = [(a["class"], a["data-run"], a.get("data-of-run")) for a in page.having("tr") if a.get("data-run")]
    evals = {r.id: r for r in store.list_runs() if r.config.get("kind") == "eval"}
    own, later = sorted((i for i, r in evals.items() if r.config.get("of_run")), key=lambda i: evals[i].created_at)
    (other,) = [i for i, r in evals.items() if not r.config.get("of_run")]
    assert rows == [
        ("run-row", other, None), ("run-row", run.run_id, None),
        ("eval-run", own, run.run_id), ("eval-run", later, run.run_id),
    ], "each evaluation run right under the run it evaluated, oldest first; one of nothing listed stays on its own"  # fmt: skip
    _, evaluation = dump_dom(f"{url}#/run/{later}")
    evaluates = evaluation.split('id="evaluates"', 1)[1].split("</p>", 1)[0]
    assert f'href="#/run/{run.run_id}"' in evaluates, f"an evaluation run's page links the run it evaluated: {evaluates}"


def test_a_dns_rebinding_name_gets_no_page_and_no_calls(served) -> None:
    """evil.example resolved to 127.0.0.1 (as a rebinding DNS server would make it) loads same-origin
    with the browser, so whatever its page fetches it could read: the server must answer it nothing."""
    url, run, _ = served
    port = url.rsplit(":", 1)[1].strip("/")
    rebound = f"http://evil.example:{port}/#/run/{run.run_id}"
    page, html = dump_dom(rebound, "--host-resolver-rules=MAP evil.example 127.0.0.1")
    assert run.run_id not in html and run.rollout_ids[0] not in html, "the run and its calls reached the page"
    assert "is not one this rollout browser is served by" in html, html[-3000:]
    assert page.having("section", id="page") == [], "the rebinding page got the browser's page"


def test_hovering_a_generated_token_shows_its_calls_request_temperature_version_and_logprobs(served) -> None:
    if DRIVER is None:
        require_engine("needs Debian's chromium-driver for hovering (apt-get install chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    url, run, store = served
    rollout_id = run.rollout_ids[1]  # call 0 sampled at T 0.7, call 1 (the branch) at T 1
    calls = store.list_calls(rollout_id)
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    try:
        driver.get(f"{url}#/rollout/{rollout_id}")
        WebDriverWait(driver, 60).until(lambda d: d.find_element(By.ID, "page").get_attribute("data-loaded"))
        assert driver.find_element(By.ID, "page").get_attribute("data-loaded") == "rollout"
        assert not driver.find_element(By.ID, "detail").is_displayed(), "the panel opens on hover only"
        for seq in (0, 1):
            token = driver.find_elements(By.CSS_SELECTOR, f'.span-generated[data-call="{seq}"] .tok')[0]
            detail = driver.find_element(By.ID, "detail")
            title = f"call {seq} · token"  # not just its span: the pointer crosses that on its way

            def hovered(d, token=token, t=title) -> bool:
                # hover again on each poll: on a loaded machine one move can land before the page listens
                ActionChains(d).move_to_element(token).perform()
                return d.find_element(By.ID, "detail-title").text.startswith(t)

            WebDriverWait(driver, 30, poll_frequency=1.0).until(hovered)
            field = {e.get_attribute("data-field"): e.text for e in detail.find_elements(By.CSS_SELECTOR, "dd")}
            temperature = f"{round(calls[seq].temperature, 4):g}"
            assert (field["temperature"], field["policy_version"]) == (temperature, str(calls[seq].policy_version)), field
            assert field["token_logprob"] == f"{round(float(calls[seq].output_logprobs[0]), 4):g}", field
            assert field["output_tokens"] == str(len(calls[seq].output_ids))
            logprobs = driver.find_element(By.ID, "detail-logprobs").text.split()
            assert len(logprobs) == len(calls[seq].output_ids), "every output logprob of the call is listed"
            request = driver.find_element(By.ID, "detail-request").text
            sent = HOSTILE.replace('"', '\\"') if seq == 0 else "Summarise the conversation so far."
            assert sent in request, f"call {seq}'s raw request shows, markup as plain text"
        assert driver.title == "clawgym rollouts" and driver.find_elements(By.TAG_NAME, "img") == []
    finally:
        driver.quit()

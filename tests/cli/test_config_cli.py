"""`clawgym config show` / `config schema` and `--set` through the real CLI: where each value came
from (default, YAML file, CLAWGYM_* variable, --set), secrets hidden, every field documented with
its variable (docs/config.md is the generated schema), an unknown key from any source named with
the nearest valid one, and `--set` reaching the config train and eval run with."""

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from clawgym.config import ClawgymConfig

DOCS = Path(__file__).parents[2] / "docs" / "config.md"


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No CLAWGYM_* variable of this process leaks into the commands run; rich wraps no line."""
    import os

    for var in [k for k in os.environ if k.upper().startswith("CLAWGYM_")]:
        monkeypatch.delenv(var)
    monkeypatch.setenv("COLUMNS", "400")
    return monkeypatch


def output(done: subprocess.CompletedProcess) -> str:
    return done.stdout + done.stderr


def test_config_show_names_the_source_of_each_value_and_hides_secrets(clawgym, tmp_path, clean_env):
    """A default, a value from the YAML file, one from a CLAWGYM_* variable and one from --set, each
    with its source; the database password in the file's store URL and the rpc secret never printed."""
    config = tmp_path / "run.yaml"
    config.write_text(
        yaml.safe_dump({
            "store": {"url": "postgresql+psycopg://clawgym:hunter2@db:5432/clawgym?password=hunter3"},
            "trainer": {"steps": 5, "model": "from-yaml"},
        })
    )  # fmt: skip
    clean_env.setenv("CLAWGYM_STORE__POOL_SIZE", "9")
    clean_env.setenv("CLAWGYM_RPC__SECRET", "s3cret-value")
    done = clawgym("config", "show", "-c", str(config), "--set", "trainer.model=tiny-qwen3", "--json")
    assert done.returncode == 0, f"clawgym config show failed:\n{output(done)}"
    shown = json.loads(done.stdout)
    assert shown["store.bus_url"] == {"value": "memory://", "source": "default"}, "a default, as such"
    assert shown["trainer.steps"] == {"value": 5, "source": str(config)}, "a value of the file names the file"
    assert shown["store.pool_size"] == {"value": 9, "source": "CLAWGYM_STORE__POOL_SIZE"}, (
        "a value of the environment names its variable"
    )
    assert shown["trainer.model"] == {"value": "tiny-qwen3", "source": "--set"}, "--set wins over the file"
    assert shown["store.url"]["value"] == "postgresql+psycopg://clawgym:***@db:5432/clawgym?password=***", (
        f"the URL's password is hidden: {shown['store.url']}"
    )
    assert shown["rpc.secret"] == {"value": "(hidden)", "source": "CLAWGYM_RPC__SECRET"}, shown["rpc.secret"]
    assert set(shown) == {key for key, _ in model_leaves(ClawgymConfig)}, "every field is shown"

    text = clawgym("config", "show", "-c", str(config), "--set", "trainer.model=tiny-qwen3")
    assert text.returncode == 0, output(text)
    for secret in ("hunter2", "hunter3", "s3cret-value"):
        assert secret not in output(done) + output(text), f"{secret!r} was printed"
    line = next(ln for ln in text.stdout.splitlines() if ln.startswith("store.pool_size "))
    assert line.split() == ["store.pool_size", "9", "(CLAWGYM_STORE__POOL_SIZE)"], line


def test_config_schema_lists_every_field_with_its_type_default_and_variable(clawgym):
    done = clawgym("config", "schema", "--json")
    assert done.returncode == 0, output(done)
    rows = {r["key"]: r for r in json.loads(done.stdout)}
    leaves = dict(model_leaves(ClawgymConfig))
    assert {k for k in rows if "<" not in k and "[]" not in k} == set(leaves), (
        "the schema's keys are the model's fields, no more, no fewer"
    )
    for key, info in leaves.items():
        row = rows[key]
        assert row["env"] == "CLAWGYM_" + key.upper().replace(".", "__"), f"{key}: {row['env']}"
        assert row["doc"] == " ".join(info.description.split()), f"{key}: its description"
    assert rows["trainer.steps"]["type"] == "int" and rows["trainer.algorithm.name"]["default"] == '"grpo"'
    assert "orchestrator.harness_settings.<harness>.max_turns" in rows, (
        "a dict of sections documents its items"
    )
    assert rows["rpc.secret"]["default"] == '""', "a secret's default is shown empty"


def test_docs_config_md_is_what_config_schema_generates(clawgym):
    """docs/config.md cannot drift from the sections: regenerate it with
    `clawgym config schema --markdown > docs/config.md`."""
    from clawgym.config_report import schema_markdown

    done = clawgym("config", "schema", "--markdown")
    assert done.returncode == 0, output(done)
    assert done.stdout == schema_markdown(), "the command prints the generator's text"
    assert DOCS.read_text() == done.stdout, (
        "docs/config.md differs from the config sections: run `clawgym config schema --markdown > docs/config.md`"
    )


# --- unknown keys: each source names the key and the nearest valid one ---


def test_an_unknown_key_in_the_yaml_file_names_the_nearest(clawgym, tmp_path, clean_env):
    config = tmp_path / "run.yaml"
    config.write_text("trainer:\n  step: 3\n")
    done = clawgym("config", "show", "-c", str(config))
    assert done.returncode == 2, output(done)
    assert "unknown config key trainer.step: did you mean trainer.steps?" in done.stderr, output(done)
    assert str(config) in done.stderr, "the error names the file"


def test_an_unknown_config_variable_names_the_nearest(clawgym, clean_env):
    clean_env.setenv("CLAWGYM_TRAINER__STEP", "3")
    done = clawgym("config", "show")
    assert done.returncode == 2, output(done)
    assert "CLAWGYM_TRAINER__STEP: unknown config key trainer.step: did you mean trainer.steps" in done.stderr
    assert "CLAWGYM_TRAINER__STEPS" in done.stderr, "the variable to set instead"
    clean_env.delenv("CLAWGYM_TRAINER__STEP")
    clean_env.setenv("CLAWGYM_TRAINR__STEPS", "3")  # a misspelt section, which pydantic-settings ignores
    done = clawgym("config", "show")
    assert done.returncode == 2 and "did you mean trainer.steps" in done.stderr, output(done)
    clean_env.delenv("CLAWGYM_TRAINR__STEPS")
    clean_env.setenv("CLAWGYM_DB_PASSWORD", "not-config")  # compose's own variables are no config keys
    assert clawgym("config", "show").returncode == 0


def test_an_unknown_set_key_names_the_nearest(clawgym, clean_env):
    done = clawgym("config", "show", "--set", "trainer.step=3")
    assert done.returncode == 2, output(done)
    assert "--set: unknown config key trainer.step: did you mean trainer.steps?" in done.stderr, output(done)
    done = clawgym("config", "show", "--set", "trainer.lr=1e-5")
    assert "did you mean trainer.algorithm.lr?" in done.stderr, f"a key in the wrong section: {output(done)}"
    done = clawgym("config", "show", "--set", "rpc.secret=abc")
    assert done.returncode == 2 and "CLAWGYM_RPC__SECRET" in done.stderr, (
        "a secret is never a command-line value"
    )


def test_an_unknown_serve_flag_names_the_nearest(clawgym, clean_env):
    done = clawgym("serve", "proxy", "--store.urll", "sqlite:///capture.db")
    assert done.returncode == 2, output(done)
    assert "unknown flag --store.urll: did you mean --store.url (store.url)?" in done.stderr, output(done)
    assert "Traceback" not in output(done), "one line, no traceback"
    done = clawgym("serve", "proxy", "--set", "proxy.max_new_tokns=3")
    assert done.returncode == 2 and "did you mean proxy.max_new_tokens?" in done.stderr, output(done)


# --- --set on the commands that read a config ---


def test_set_values_are_yaml_scalars_or_json_and_reach_config_show(clawgym, clean_env):
    done = clawgym(
        "config", "show", "--json",
        "--set", "trainer.steps=3",
        "--set", 'trainer.harnesses=[{"name": "reference", "weight": 2}]',
        "--set", "trainer.run_name=2024",
        "--set", "proxy.temperature=null",
    )  # fmt: skip
    assert done.returncode == 0, output(done)
    shown = {k: v["value"] for k, v in json.loads(done.stdout).items()}
    assert shown["trainer.steps"] == 3
    assert shown["trainer.harnesses"] == [{"name": "reference", "weight": 2.0}], "a list as JSON"
    assert shown["trainer.run_name"] == "2024", "a text field keeps the text as typed"
    assert shown["proxy.temperature"] is None


def test_set_reaches_the_config_train_runs_with(clawgym, run_config, tmp_path, clean_env):
    """Cheap: --resume with nothing recorded stops before loading anything, naming the run.json that the
    --set run name points to."""
    done = clawgym("train", "-c", str(run_config()), "--resume", "--set", "trainer.run_name=from-set")
    assert done.returncode == 2, output(done)
    assert f"no {tmp_path / 'checkpoints' / 'from-set' / 'run.json'}" in output(done), (
        f"train's config has the --set run name: {output(done)}"
    )


def test_set_reaches_the_config_eval_runs_with(clawgym, run_config, clean_env):
    done = clawgym("eval", "-c", str(run_config()), "-H", "nop", "--tasks", "1", "--checkpoint", "7",
                   "--set", "trainer.run_name=from-set")  # fmt: skip
    assert done.returncode == 2, output(done)
    assert "checkpoints/from-set)" in output(done), f"eval's config has the --set run name: {output(done)}"


def test_the_store_options_are_spelt_as_serve_spells_them(clawgym, tmp_path, clean_env):
    """`--store.url` / `--store.grpc-url` on session, eval, export and browse, as on `clawgym serve`."""
    db = tmp_path / "capture.db"
    done = clawgym("session", "new", "--store.url", f"sqlite:///{db}", "--harness", "claude-code")
    assert done.returncode == 0 and db.is_file(), output(done)
    for command in (["serve", "proxy"], ["session", "new"], ["eval"], ["export"], ["browse"]):
        done = clawgym(*command, "--help")
        text = output(done)
        assert "--store.url" in text and "--store.grpc-url" in text, f"{' '.join(command)}: {text[:2000]}"
        assert "--set" in text, f"{' '.join(command)} takes --set"


def model_leaves(model: type[BaseModel], prefix: str = "") -> list[tuple[str, object]]:
    """The test's own walk of the model: (dotted key, field info) of every field that holds a value."""
    out = []
    for name, info in model.model_fields.items():
        if isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel):
            out += model_leaves(info.annotation, f"{prefix}{name}.")
        else:
            out.append((f"{prefix}{name}", info))
    return out


def test_set_reaches_the_config_the_quickstart_records(clawgym, tmp_path, clean_env):
    """The quickstart builds its own config; --set goes over it and into the run folder's config.yaml
    (here a model that does not exist, so the run stops right after writing it; the folder exists
    beforehand, so the failed start keeps it)."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    done = clawgym("quickstart", "--run-dir", str(run_dir),
                   "--set", "trainer.model=/no/such/model", "--set", "trainer.algorithm.lr=0.5")  # fmt: skip
    assert done.returncode == 2 and "/no/such/model" in output(done), output(done)
    recorded = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert recorded["trainer"]["model"] == "/no/such/model", "--set reached the recorded config"
    assert (
        recorded["trainer"]["algorithm"]["lr"] == 0.5 and recorded["trainer"]["algorithm"]["name"] == "grpo"
    ), "the quickstart's other settings stay"

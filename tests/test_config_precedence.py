"""Where a setting comes from: command-line flag > CLAWGYM_* environment > YAML file > default.

Checked for one field of every section, nested ones where the section has them, through the same
entry point every `clawgym serve X` uses (`clawgym.flags.service_config`) and through `load_config`.
"""

import os
from pathlib import Path

import pytest
import yaml

from clawgym.config import ClawgymConfig, load_config
from clawgym.errors import InvalidArgument
from clawgym.flags import nest, service_config

# (section, dotted field path below the section, flag, YAML value, env value, flag value)
FIELDS = [
    ("store", "pool_size", "--pool-size", 3, "5", "7"),
    ("inference", "prefill_chunk", "--prefill-chunk", 64, "128", "256"),
    ("proxy", "max_new_tokens", "--max-new-tokens", 10, "20", "30"),
    ("sandbox", "kubernetes.namespace", "--kubernetes.namespace", "from-yaml", "from-env", "from-flag"),
    ("sandbox", "docker.relay_image", "--docker.relay-image", "from-yaml", "from-env", "from-flag"),
    ("trainer", "algorithm.lr", "--algorithm.lr", 0.001, "0.002", "0.003"),
    ("orchestrator", "retry_backoff_s", "--retry-backoff-s", 1.5, "2.5", "3.5"),
    ("evaluation", "samples", "--samples", 2, "3", "4"),
]


def value(cfg: ClawgymConfig, section: str, path: str):
    node = getattr(cfg, section)
    for part in path.split("."):
        node = getattr(node, part)
    return node


def env_name(section: str, path: str) -> str:
    return f"CLAWGYM_{section.upper()}__" + "__".join(p.upper() for p in path.split("."))


@pytest.mark.parametrize(("section", "path", "flag", "in_yaml", "in_env", "in_flag"), FIELDS)
def test_a_flag_beats_the_environment_which_beats_the_file_which_beats_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, section, path, flag, in_yaml, in_env, in_flag
) -> None:
    default = value(ClawgymConfig(), section, path)
    for var in [k for k in os.environ if k.startswith("CLAWGYM_")]:
        monkeypatch.delenv(var)
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(nest({f"{section}.{path}": in_yaml})))

    def read(argv: list[str]):
        return value(service_config(section, ["-c", str(config), *argv], description="test"), section, path)

    assert value(service_config(section, [], description="test"), section, path) == default, (
        "with no file, variable or flag the field's default applies"
    )
    assert read([]) == in_yaml, "the YAML file overrides the default"
    monkeypatch.setenv(env_name(section, path), in_env)
    assert str(read([])) == in_env, f"{env_name(section, path)} overrides the YAML file"
    assert str(read([flag, in_flag])) == in_flag, f"{flag} overrides the environment and the file"


def test_load_config_takes_the_same_order_for_a_whole_section_in_json(tmp_path: Path) -> None:
    """A whole section as JSON in one variable merges over the file, field by field."""
    config = tmp_path / "run.yaml"
    config.write_text("store:\n  url: sqlite:///a.db\n  pool_size: 3\n")
    cfg = load_config(config, environ={"CLAWGYM_STORE": '{"pool_size": 9}'})
    assert (cfg.store.url, cfg.store.pool_size) == ("sqlite:///a.db", 9), (
        "a section given as JSON overrides only the fields it names"
    )
    cfg = load_config(
        config, environ={"CLAWGYM_STORE": '{"pool_size": 9}'}, flags={"store": {"pool_size": 4}}
    )
    assert cfg.store.pool_size == 4, "a flag beats the environment"


def test_a_json_field_takes_json_from_the_environment_and_the_command_line() -> None:
    images = '{"codex": "img:1"}'
    cfg = load_config(environ={"CLAWGYM_ORCHESTRATOR__SANDBOX_IMAGES": images})
    assert cfg.orchestrator.sandbox_images == {"codex": "img:1"}, "a dict field parses its variable as JSON"
    cfg = service_config("orchestrator", ["--sandbox-images", images], description="test")
    assert cfg.orchestrator.sandbox_images == {"codex": "img:1"}, "and its flag too"


def test_a_bad_value_from_any_source_names_the_field() -> None:
    with pytest.raises(InvalidArgument, match=r"store\.pool_size"):
        load_config(environ={"CLAWGYM_STORE__POOL_SIZE": "zero"})
    with pytest.raises(InvalidArgument, match=r"store\.pool_size"):
        service_config("store", ["--pool-size", "-1"], description="test")


def test_every_field_of_a_service_section_is_a_flag_with_its_description(capsys) -> None:
    """`clawgym serve store --help` lists each field of the store section with its doc."""
    with pytest.raises(SystemExit):
        service_config("store", ["--help"], description="test")
    help_text = " ".join(capsys.readouterr().out.split())
    for name, info in ClawgymConfig.model_fields["store"].annotation.model_fields.items():
        assert f"--{name.replace('_', '-')}" in help_text, f"the field store.{name} has no flag"
        assert " ".join(info.description.split())[:40] in help_text, (
            f"--help lacks store.{name}'s description"
        )


def test_set_beats_every_other_source_and_takes_yaml_scalars_and_json(tmp_path: Path) -> None:
    """`--set a.b=c` (every command, `clawgym serve X` included) wins over a flag, the environment and
    the file; a list field takes JSON, a text field keeps the text as typed."""
    config = tmp_path / "run.yaml"
    config.write_text("proxy:\n  max_new_tokens: 10\n")
    env = {"CLAWGYM_PROXY__MAX_NEW_TOKENS": "20"}
    cfg = load_config(
        config, environ=env, flags={"proxy": {"max_new_tokens": 30}}, sets=["proxy.max_new_tokens=40"]
    )
    assert cfg.proxy.max_new_tokens == 40, "--set beats the flag, the environment and the file"
    cfg = service_config(
        "proxy", ["--max-new-tokens", "30", "--set", "proxy.max_new_tokens=40"], description="t"
    )
    assert cfg.proxy.max_new_tokens == 40, "clawgym serve takes --set too, over its flags"
    cfg = load_config(
        sets=['trainer.harnesses=[{"name": "reference", "weight": 2}]', "trainer.run_name=2024"]
    )
    assert (cfg.trainer.harnesses[0].weight, cfg.trainer.run_name) == (2.0, "2024"), (
        "JSON list; text as typed"
    )


@pytest.mark.parametrize(
    ("source", "error"),
    [
        ({"yaml": "trainer:\n  step: 3\n"}, r"run\.yaml: unknown config key trainer\.step: did you mean trainer\.steps\?"),
        ({"environ": {"CLAWGYM_TRAINER__STEP": "3"}}, r"did you mean trainer\.steps \(CLAWGYM_TRAINER__STEPS\)\?"),
        ({"environ": {"CLAWGYM_STORE": '{"pol_size": 3}'}}, r"store\.pol_size: did you mean store\.pool_size"),
        ({"sets": ["trainer.algorithm.lrr=1"]}, r"--set: unknown config key trainer\.algorithm\.lrr: did you mean trainer\.algorithm\.lr\?"),
        ({"flags": {"orchestrator": {"harness_settings": {"reference": {"max_turn": 1}}}}},
         r"did you mean orchestrator\.harness_settings\.reference\.max_turns\?"),
    ],
)  # fmt: skip
def test_an_unknown_key_from_any_source_names_the_nearest_valid_one(tmp_path: Path, source: dict, error: str):
    path = None
    if "yaml" in source:
        path = tmp_path / "run.yaml"
        path.write_text(source["yaml"])
    with pytest.raises(InvalidArgument, match=error):
        load_config(
            path, environ=source.get("environ", {}), flags=source.get("flags"), sets=source.get("sets", ())
        )


def test_an_unknown_serve_flag_names_the_nearest_flag_and_its_key() -> None:
    with pytest.raises(
        InvalidArgument, match=r"unknown flag --store\.urll: did you mean --store\.url \(store\.url\)\?"
    ):
        service_config("proxy", ["--store.urll", "sqlite:///x.db"], description="t", clients_of=("store",))


def test_a_missing_file_bad_yaml_or_a_variable_that_is_not_json_is_one_error_naming_it(
    tmp_path: Path,
) -> None:
    with pytest.raises(InvalidArgument, match=r"nope\.yaml: cannot read the config file"):
        load_config(tmp_path / "nope.yaml")
    (tmp_path / "bad.yaml").write_text("a: [\n")
    with pytest.raises(InvalidArgument, match=r"bad\.yaml: not YAML"):
        load_config(tmp_path / "bad.yaml")
    with pytest.raises(
        InvalidArgument, match=r"CLAWGYM_TRAINER__TASKS: not JSON, which trainer\.tasks takes$"
    ):
        load_config(environ={"CLAWGYM_TRAINER__TASKS": "hunter2"})

import json
from pathlib import Path

import six  # provisioned from the Dockerfile's pip step


def test_config_exists():
    assert Path("/app/config.json").is_file()


def test_retries_is_three():
    assert json.loads(Path("/app/config.json").read_text())["retries"] == 3


def test_provisioned_package_is_importable():
    assert six.PY3

"""The user's defaults: config.toml, the environment and the flags, with sbatch's precedence and a source each."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from buildkit.cli import main
from buildkit.config.user import load
from buildkit.errors import ConfigError
from buildkit.launch.plan import LaunchRequest


def _file(tmp_path: Path, text: str) -> dict[str, str]:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return {"CKIT_CONFIG": str(path)}


def test_flag_over_env_over_file_over_default(tmp_path) -> None:
    (tmp_path / "r1").mkdir()
    (tmp_path / "r2").mkdir()
    env = _file(tmp_path, 'site = "tara"\naccount = "file-acct"\npartition = "p"\nrecipes = ["r1"]\n'
                          '[store]\nmax_size = "20G"\n')
    config = load(env)
    assert (config.site, config.account, config.partition, config.time) == ("tara", "file-acct", "p", None)
    assert config.store_max_size == 20 << 30 and config.folders("recipes") == (tmp_path / "r1",)
    assert config.get("account").source == f"{tmp_path}/config.toml:2"
    assert config.get("store.max_size").source == f"{tmp_path}/config.toml:6"
    assert config.get("time").source == "default"
    config = load({**env, "SBATCH_ACCOUNT": "env-acct", "CKIT_STORE_MAX_SIZE": "1M", "CKIT_SITE": "oci",
                   "SBATCH_TIMELIMIT": "1:00:00"})
    assert (config.site, config.account, config.time, config.store_max_size) == ("oci", "env-acct", "1:00:00",
                                                                                 1 << 20)
    assert config.get("account").source == "env SBATCH_ACCOUNT"
    # folders: the environment's replace the file's (added where folders are searched); flags come first
    config = load({**env, "CKIT_RECIPES_PATH": str(tmp_path / "r2")}, flags={"recipes": [tmp_path / "f"]})
    assert config.folders("recipes") == (tmp_path / "f",)
    config = load(env, flags={"recipes": [tmp_path / "f"]})
    assert config.folders("recipes") == (tmp_path / "f", tmp_path / "r1")
    assert config.get("recipes").source == f"flag --recipes + {tmp_path}/config.toml:4"


def test_no_file_is_the_defaults(tmp_path) -> None:
    config = load({"XDG_CONFIG_HOME": str(tmp_path)})
    assert config.path == tmp_path / "ckit" / "config.toml" and not config.exists
    assert all(s.source == "default" and s.value is None for s in config.settings)


@pytest.mark.parametrize(("text", "says", "hint"), [
    ('site = "tara"\nacount = "x"\n', "config.toml:2: unknown key 'acount'", "did you mean account?"),
    ('[store]\nmax_sise = "1G"\n', "config.toml:2: unknown key 'store.max_sise'", "did you mean store.max_size?"),
    ('[launch]\nsite = "x"\n', "config.toml:1: unknown key 'launch'", "the keys are"),
    ("site = \n", "not valid TOML: Invalid value (at line 1, column 8)", "fix the line"),
    ("account = 3\n", "config.toml:1: account must be a string", 'account = "'),
    ('account = "a\\nb"\n', "config.toml:1: account: 'a\\nb' is not a name", "printable"),
    ("[store]\nmax_size = true\n", "config.toml:2: store.max_size must be a size", "20G"),
    ('[store]\nmax_size = "lots"\n', "config.toml:2: store.max_size: 'lots' is not a size", "500G"),
    ('sites = ["nowhere"]\n', "config.toml:1: sites: ", "create it"),
    ("recipes = 3\n", "config.toml:1: recipes must be a list of folders", "recipes = ["),
])
def test_a_broken_file_names_its_line(tmp_path, text, says, hint) -> None:
    with pytest.raises(ConfigError) as caught:
        load(_file(tmp_path, text))
    assert says in caught.value.message and hint in (caught.value.hint or ""), caught.value


def test_bad_input_around_the_file(tmp_path) -> None:
    with pytest.raises(ConfigError, match="CKIT_CONFIG=.*nope.toml: no such file"):
        load({"CKIT_CONFIG": str(tmp_path / "nope.toml")})
    with pytest.raises(ConfigError, match="cannot read the config file"):
        load({"CKIT_CONFIG": str(tmp_path)})
    (tmp_path / "bin.toml").write_bytes(b"site = \"\xff\"\n")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load({"CKIT_CONFIG": str(tmp_path / "bin.toml")})
    with pytest.raises(ConfigError, match="CKIT_STORE_MAX_SIZE: 'x' is not a size"):
        load({"XDG_CONFIG_HOME": str(tmp_path), "CKIT_STORE_MAX_SIZE": "x"})


def test_a_broken_file_is_one_error_line_exit_2(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("CKIT_CONFIG", _file(tmp_path, "acount = 1\n")["CKIT_CONFIG"])
    assert main(["recipes"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ckit: error: {tmp_path}/config.toml:1: unknown key 'acount'") and "Traceback" not in err


def test_config_show_says_where_each_value_came_from(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("CKIT_CONFIG", _file(tmp_path, 'account = "a1"\n[store]\nmax_size = "2G"\n')["CKIT_CONFIG"])
    monkeypatch.setenv("SBATCH_PARTITION", "gpu")
    assert main(["config", "show", "--json", "--sites", str(tmp_path)]) == 0
    data = json.loads(capsys.readouterr().out)
    values = {key: (v["value"], v["source"]) for key, v in data["values"].items()}
    assert values["account"] == ("a1", f"{tmp_path}/config.toml:1")
    assert values["partition"] == ("gpu", "env SBATCH_PARTITION")
    assert values["sites"] == ([str(tmp_path)], "flag --sites")
    assert values["store.max_size"] == (2 << 30, f"{tmp_path}/config.toml:3")
    assert values["site"] == (None, "default") and data["exists"] is True
    assert main(["config", "show"]) == 0
    out = capsys.readouterr().out
    assert "  account         a1 " in out and "env SBATCH_PARTITION" in out


def test_the_store_cap_reaches_the_settings(monkeypatch) -> None:
    from buildkit.commands.app import SETTINGS

    monkeypatch.setenv("CKIT_STORE_MAX_SIZE", "3G")
    assert main(["recipes", "--json"]) == 0
    assert SETTINGS.store_max_size == 3 << 30


def test_launch_takes_site_account_and_partition_from_the_defaults(tmp_path, monkeypatch, capsys) -> None:
    # before: --site was required, -A typed every time and SBATCH_ACCOUNT ignored (tara: "-A project required")
    monkeypatch.setenv("CKIT_CONFIG", _file(tmp_path, 'site = "tara"\naccount = "file-acct"\n')["CKIT_CONFIG"])
    assert main(["launch", "--dry-run", "--", "true"]) == 0
    assert "#SBATCH --account=file-acct\n" in capsys.readouterr().out
    monkeypatch.setenv("SBATCH_ACCOUNT", "env-acct")
    monkeypatch.setenv("SBATCH_TIMELIMIT", "01:00:00")
    assert main(["launch", "--dry-run", "--", "true"]) == 0
    out = capsys.readouterr().out
    assert "#SBATCH --account=env-acct\n" in out and "#SBATCH --time=01:00:00\n" in out
    assert main(["launch", "--site", "local", "-A", "flag-acct", "--dry-run", "--", "true"]) == 0
    assert "#SBATCH --account=flag-acct\n" in capsys.readouterr().out
    assert main(["shell", "--dry-run"]) == 0
    assert "--account=env-acct" in capsys.readouterr().out


def test_no_site_anywhere_is_bad_input_with_a_hint_that_works(capsys) -> None:
    assert main(["launch", "--dry-run", "--", "true"]) == 2
    err = capsys.readouterr().err
    assert "no site: give --site SITE" in err and "`ckit sites` lists the sites" in err
    assert main(["sites"]) == 0 and main(["config", "show"]) == 0


def test_the_api_reads_the_defaults_too(tmp_path, monkeypatch) -> None:
    import ckit

    monkeypatch.setenv("SBATCH_PARTITION", "batch")
    plan = ckit.plan_launch("local", LaunchRequest(command=("true",)))
    assert plan.partition.name == "batch"
    given = load(_file(tmp_path, 'site = "local"\npartition = "multi"\n'))
    plan = ckit.plan_launch(None, LaunchRequest(command=("true",)), defaults=given)
    assert (plan.site.name, plan.partition.name) == ("local", "multi")


def test_sbatch_does_not_get_the_variables_ckit_decided(monkeypatch) -> None:
    """sbatch lets SBATCH_PARTITION override the script's #SBATCH line: the -p given on the line would be lost."""
    import subprocess

    from buildkit.launch import slurmctl, submit

    seen: dict[str, object] = {}

    def fake_run(argv, **kwargs):  # type: ignore[no-untyped-def]
        seen.update(kwargs)
        return subprocess.CompletedProcess(argv, 0, b"42\n", b"")

    monkeypatch.setenv("SBATCH_PARTITION", "batch")
    monkeypatch.setenv("SBATCH_EXCLUSIVE", "1")
    monkeypatch.setattr(slurmctl, "require", lambda *a, **k: None)
    monkeypatch.setattr(subprocess, "run", fake_run)
    assert submit.submit(Path("/x.sbatch")).job_id == "42"
    env = seen["env"]
    assert isinstance(env, dict) and "SBATCH_PARTITION" not in env and env["SBATCH_EXCLUSIVE"] == "1"

"""Credentials and transport: htpasswd (Basic), `ckit login`, docker config / env credentials, TLS with a test CA,
and a scan for secrets in logs, --json output and written files."""

from __future__ import annotations

import base64
import json
import os
import stat
from pathlib import Path

from tests.integration.registry_helpers import ckit, fake_sif, unique_repo


def _docker_config(tmp_path: Path) -> dict[str, str]:
    folder = tmp_path / "docker-config"
    folder.mkdir(exist_ok=True)
    return {"DOCKER_CONFIG": str(folder)}


def test_login_verifies_and_stores_credentials_like_docker(registry_auth, tmp_path: Path) -> None:
    env = _docker_config(tmp_path)
    done = ckit("login", registry_auth.host, "-u", registry_auth.username, "--password-stdin",
                input=registry_auth.password + "\n", env=env)
    assert done.returncode == 0, done.stderr
    config_file = Path(env["DOCKER_CONFIG"]) / "config.json"
    assert stat.S_IMODE(config_file.stat().st_mode) == 0o600
    stored = json.loads(config_file.read_text())
    expected = base64.b64encode(f"{registry_auth.username}:{registry_auth.password}".encode()).decode()
    assert stored == {"auths": {registry_auth.host: {"auth": expected}}}
    assert done.stderr.strip() == f"Login to {registry_auth.host} succeeded; credentials saved in {config_file}"

    sif = fake_sif(tmp_path / "auth.sif")
    ref = f"{registry_auth.host}/{unique_repo()}:v1"
    pushed = ckit("push", str(sif), ref, env=env)
    assert pushed.returncode == 0, pushed.stderr
    pulled = ckit("pull", ref, "-o", str(tmp_path / "out"), env=env)
    assert pulled.returncode == 0, pulled.stderr
    assert (tmp_path / "out" / "auth.sif").read_bytes() == sif.read_bytes()


def test_login_with_a_wrong_password_fails_and_stores_nothing(registry_auth, tmp_path: Path) -> None:
    env = _docker_config(tmp_path)
    done = ckit("login", registry_auth.host, "-u", registry_auth.username, "--password-stdin",
                input="wrong-password\n", env=env)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"ckit: error: registry {registry_auth.host} rejected the credentials of user 'ckituser' (from ckit login)",
        f"  hint: check the user name and password, then run `ckit login {registry_auth.host}`",
    ]
    assert not (Path(env["DOCKER_CONFIG"]) / "config.json").exists()


def test_no_credentials_and_wrong_env_credentials_are_clear(registry_auth, tmp_path: Path) -> None:
    env = _docker_config(tmp_path)
    sif = fake_sif(tmp_path / "x.sif")
    ref = f"{registry_auth.host}/{unique_repo()}:v1"
    anonymous = ckit("push", str(sif), ref, env=env)
    assert anonymous.returncode == 1
    assert anonymous.stderr.splitlines()[0] == f"ckit: error: registry {registry_auth.host} requires authentication"
    wrong = ckit("push", str(sif), ref, env={**env, "CKIT_REGISTRY_USER": "ckituser",
                                            "CKIT_REGISTRY_PASSWORD": "nope-nope"})
    assert wrong.returncode == 1
    assert wrong.stderr.splitlines()[0] == (
        f"ckit: error: registry {registry_auth.host} rejected the credentials of user 'ckituser' (from environment)")
    right = ckit("push", str(sif), ref, "--json", env={**env, "CKIT_REGISTRY_USER": registry_auth.username,
                                                       "CKIT_REGISTRY_PASSWORD": registry_auth.password})
    assert right.returncode == 0, right.stderr


def test_secrets_never_reach_logs_json_or_files(registry_auth, tmp_path: Path) -> None:
    env = {**_docker_config(tmp_path), "CKIT_REGISTRY_USER": registry_auth.username,
           "CKIT_REGISTRY_PASSWORD": registry_auth.password}
    sif = fake_sif(tmp_path / "s.sif")
    ref = f"{registry_auth.host}/{unique_repo()}:v1"
    out = tmp_path / "out"
    runs = [ckit("--debug", "push", str(sif), ref, "--json", env=env),
            ckit("--debug", "pull", ref, "-o", str(out), "--json", env=env),
            ckit("--debug", "stage", ref, "--dest", str(tmp_path / "shared"), "--json", env=env),
            ckit("--debug", "push", str(sif), ref, env={**env, "CKIT_REGISTRY_PASSWORD": "bad-" + "secret-77"})]
    assert [r.returncode for r in runs] == [0, 0, 0, 1]
    assert "ckit.registry" in runs[0].stderr  # --debug logging is on, so the scan sees real log lines
    basic = base64.b64encode(f"{registry_auth.username}:{registry_auth.password}".encode()).decode()
    for secret in (registry_auth.password, basic, "bad-secret-77"):
        for ran in runs:
            assert secret not in ran.stdout and secret not in ran.stderr
        for path in tmp_path.rglob("*"):
            if path.is_file() and path.name != "config.json":
                assert secret.encode() not in path.read_bytes(), path


def test_tls_registry_needs_the_ca_file(registry_tls, tmp_path: Path) -> None:
    sif = fake_sif(tmp_path / "tls.sif")
    ref = f"{registry_tls.host}/{unique_repo()}:v1"
    untrusted = ckit("push", str(sif), ref)
    assert untrusted.returncode == 1
    assert untrusted.stderr.splitlines() == [
        f"ckit: error: TLS connection to registry {registry_tls.host} failed: the certificate is not trusted "
        "or does not match",
        "  hint: pass --ca-file PATH for a private CA, or --insecure to skip verification",
    ]
    pushed = ckit("push", str(sif), ref, "--ca-file", str(registry_tls.ca_file))
    assert pushed.returncode == 0, pushed.stderr
    pulled = ckit("pull", ref, "--ca-file", str(registry_tls.ca_file), "-o", str(tmp_path / "o"))
    assert pulled.returncode == 0, pulled.stderr
    assert (tmp_path / "o" / "tls.sif").read_bytes() == sif.read_bytes()
    insecure = ckit("pull", ref, "--insecure", "-o", str(tmp_path / "i"))
    assert insecure.returncode == 0, insecure.stderr


def test_credentials_from_a_credential_helper(registry_auth, tmp_path: Path) -> None:
    """credsStore: `ckit login` stores through docker-credential-NAME and push reads it back (stdin only)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    store = tmp_path / "helper-store.json"
    helper = bin_dir / "docker-credential-ckittest"
    helper.write_text(f"""#!/usr/bin/env python3
import json, sys
path = {str(store)!r}
data = json.load(open(path)) if __import__("os").path.exists(path) else {{}}
req = sys.stdin.read()
if sys.argv[1] == "store":
    item = json.loads(req); data[item["ServerURL"]] = item; json.dump(data, open(path, "w"))
elif sys.argv[1] == "get":
    if req.strip() not in data:
        print("credentials not found in native keychain"); sys.exit(1)
    print(json.dumps({{"Username": data[req.strip()]["Username"], "Secret": data[req.strip()]["Secret"]}}))
elif sys.argv[1] == "erase":
    if data.pop(req.strip(), None) is None:
        print("credentials not found in native keychain"); sys.exit(1)
    json.dump(data, open(path, "w"))
""")
    helper.chmod(0o755)
    env = {**_docker_config(tmp_path), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    config_file = Path(env["DOCKER_CONFIG"]) / "config.json"
    config_file.write_text(json.dumps({"credsStore": "ckittest"}))
    done = ckit("login", registry_auth.host, "-u", registry_auth.username, "--password-stdin",
                input=registry_auth.password, env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(config_file.read_text()) == {"auths": {registry_auth.host: {}}, "credsStore": "ckittest"}
    assert json.loads(store.read_text())[registry_auth.host]["Secret"] == registry_auth.password
    sif = fake_sif(tmp_path / "h.sif")
    pushed = ckit("push", str(sif), f"{registry_auth.host}/{unique_repo()}:v1", env=env)
    assert pushed.returncode == 0, pushed.stderr

    out = ckit("logout", registry_auth.host, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stderr.strip() == (f"Removed login credentials for {registry_auth.host} from "
                                  f"docker-credential-ckittest, {config_file}")
    assert json.loads(store.read_text()) == {}
    assert json.loads(config_file.read_text()) == {"auths": {}, "credsStore": "ckittest"}


def test_logout_forgets_what_login_stored(registry_auth, tmp_path: Path) -> None:
    env = _docker_config(tmp_path)
    config_file = Path(env["DOCKER_CONFIG"]) / "config.json"
    config_file.write_text(json.dumps({"auths": {"other.example.org": {"auth": "eDp5"}}}))
    done = ckit("login", registry_auth.host, "-u", registry_auth.username, "--password-stdin",
                input=registry_auth.password, env=env)
    assert done.returncode == 0, done.stderr
    sif = fake_sif(tmp_path / "out.sif")
    ref = f"{registry_auth.host}/{unique_repo()}:v1"
    assert ckit("push", str(sif), ref, env=env).returncode == 0
    out = ckit("logout", registry_auth.host, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stderr.strip() == f"Removed login credentials for {registry_auth.host} from {config_file}"
    assert json.loads(config_file.read_text()) == {"auths": {"other.example.org": {"auth": "eDp5"}}}
    assert stat.S_IMODE(config_file.stat().st_mode) == 0o600
    refused = ckit("push", str(sif), ref, env=env)
    assert refused.returncode == 1
    assert refused.stderr.splitlines()[0] == f"ckit: error: registry {registry_auth.host} requires authentication"
    again = ckit("logout", registry_auth.host, env=env)
    assert again.returncode == 0 and again.stderr.strip() == f"Not logged in to {registry_auth.host}"
    env_creds = ckit("logout", registry_auth.host, env={**env, "CKIT_REGISTRY_USER": "u", "CKIT_REGISTRY_PASSWORD": "p"})
    assert "CKIT_REGISTRY_USER/CKIT_REGISTRY_PASSWORD are set in the environment" in env_creds.stderr

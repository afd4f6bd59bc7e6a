"""The importer's inputs: enroot URIs, enroot's .credentials netrc, the importer config file and environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from buildkit.errors import ConfigError
from buildkit.importer import config, netrc
from buildkit.importer.uri import parse_uri
from buildkit.registry.distribution.reference import Reference, enroot_form

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(("uri", "user", "ref"), [
    ("docker://nvcr.io#nvidia/pytorch:24.06-py3", None, Reference("nvcr.io", "nvidia/pytorch", "24.06-py3")),
    ("docker://nvcr.io/nvidia/pytorch:24.06-py3", None, Reference("nvcr.io", "nvidia/pytorch", "24.06-py3")),
    ("docker://$oauthtoken@nvcr.io#nvidia/pytorch:24.06-py3", "$oauthtoken",
     Reference("nvcr.io", "nvidia/pytorch", "24.06-py3")),
    ("docker://ubuntu:24.04", None, Reference("docker.io", "library/ubuntu", "24.04")),
    ("docker://registry-1.docker.io#ubuntu:24.04", None, Reference("docker.io", "library/ubuntu", "24.04")),
    ("docker://ubuntu", None, Reference("docker.io", "library/ubuntu")),
    (f"docker://ubuntu@{DIGEST}", None, Reference("docker.io", "library/ubuntu", None, DIGEST)),
    (f"docker://alice@127.0.0.1:5000#team/app:v1@{DIGEST}", "alice",
     Reference("127.0.0.1:5000", "team/app", "v1", DIGEST)),
    ("docker://registry#app:1", None, Reference("registry", "app", "1")),  # before '#' is always a registry
    ("nvcr.io#nvidia/cuda:12.4.1-base-ubuntu22.04", None, Reference("nvcr.io", "nvidia/cuda", "12.4.1-base-ubuntu22.04")),
])
def test_enroot_uri_forms(uri: str, user: str | None, ref: Reference) -> None:
    parsed = parse_uri(uri)
    assert (parsed.user, parsed.ref) == (user, ref)


@pytest.mark.parametrize("scheme", ["dockerd", "podman"])
def test_engine_uris_are_refused_with_what_the_admin_can_do(scheme: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_uri(f"{scheme}://ubuntu:24.04")
    assert err.value.exit_code == 2
    assert "cannot share" in err.value.message and "remove importer= from plugstack.conf" in str(err.value.hint)


@pytest.mark.parametrize("uri", ["docker://", "docker://UPPER/case:1", "docker://a b", "oras://x/y:1",
                                 "docker://bad user@reg#x:1", "docker://reg#x:bad tag", "docker://x:1@sha256:zz"])
def test_bad_uris_are_bad_input(uri: str) -> None:
    with pytest.raises(ConfigError):
        parse_uri(uri)


def test_enroot_form_is_the_provenance_spelling() -> None:
    assert enroot_form(Reference("nvcr.io", "nvidia/pytorch", None, DIGEST)) == f"docker://nvcr.io#nvidia/pytorch@{DIGEST}"


def creds_file(tmp_path: Path, text: str) -> dict[str, str]:
    (tmp_path / "enroot").mkdir(exist_ok=True)
    (tmp_path / "enroot" / ".credentials").write_text(text)
    return {"ENROOT_CONFIG_PATH": str(tmp_path / "enroot"), "NGC_KEY": "s3cret"}


def test_netrc_lookup_like_enroot(tmp_path: Path) -> None:
    env = creds_file(tmp_path, "machine nvcr.io login $oauthtoken password $NGC_KEY\n"
                               "machine 127.0.0.1 login alice password pw-a\n"
                               "machine 127.0.0.1 login bob password ${NGC_KEY}\n"
                               "machine auth.docker.io login hubuser password hubpw\n")
    found = netrc.lookup("nvcr.io", None, env)
    assert found is not None and (found.username, found.password) == ("$oauthtoken", "s3cret")
    first = netrc.lookup("127.0.0.1:5000", None, env)  # the port is not part of the machine, as in enroot
    assert first is not None and first.username == "alice"
    bob = netrc.lookup("127.0.0.1:5000", "bob", env)
    assert bob is not None and bob.password == "s3cret"
    hub = netrc.lookup("docker.io", None, env)
    assert hub is not None and hub.username == "hubuser"
    assert netrc.lookup("quay.io", None, env) is None
    with pytest.raises(ConfigError, match="no password for carol@nvcr.io"):
        netrc.lookup("nvcr.io", "carol", env)


def test_netrc_default_path_and_refused_commands(tmp_path: Path) -> None:
    assert netrc.credentials_path({"HOME": "/home/u"}) == Path("/home/u/.config/enroot/.credentials")
    assert netrc.credentials_path({"XDG_CONFIG_HOME": "/x"}) == Path("/x/enroot/.credentials")
    env = creds_file(tmp_path, "machine nvcr.io login u password $(cat /etc/key)\n")
    with pytest.raises(ConfigError, match="runs a command"):
        netrc.lookup("nvcr.io", None, env)
    env = creds_file(tmp_path, "machine nvcr.io login u password $UNSET_VAR\n")
    with pytest.raises(ConfigError, match="UNSET_VAR, which is not set"):
        netrc.lookup("nvcr.io", None, env)


def test_config_file_then_environment(tmp_path: Path) -> None:
    conf = tmp_path / "importer.yaml"
    conf.write_text("cache: /shared/ckit\nmax_size: 1.5G\ncompression: gzip:1\nallow_http: [reg:5000]\n"
                    "lock_stale_seconds: 30\n")
    cfg = config.load({"CKIT_IMPORTER_CONFIG": str(conf)})
    assert cfg.cache == Path("/shared/ckit") and cfg.max_size == int(1.5 * 1024**3)
    assert (cfg.compression, cfg.allow_http, cfg.lock_stale_seconds) == ("gzip:1", ("reg:5000",), 30.0)
    env = {"CKIT_IMPORTER_CONFIG": str(conf), "CKIT_CLUSTER_CACHE": "/other"}
    assert config.load(env).cache == Path("/other")


def test_config_errors_name_the_file_and_key(tmp_path: Path) -> None:
    conf = tmp_path / "importer.yaml"
    conf.write_text("cache: /shared\nmax_sise: 10G\n")
    with pytest.raises(ConfigError) as err:
        config.load({"CKIT_IMPORTER_CONFIG": str(conf)})
    assert f"{conf}:2" in err.value.message and "did you mean 'max_size'" in str(err.value.hint)
    conf.write_text("cache: relative/path\n")
    with pytest.raises(ConfigError, match="not an absolute path"):
        config.load({"CKIT_IMPORTER_CONFIG": str(conf)})
    with pytest.raises(ConfigError, match="no cluster image cache is configured"):
        config.load({"CKIT_IMPORTER_CONFIG": str(tmp_path / "absent.yaml")})


def test_config_from_a_site_profile(tmp_path: Path) -> None:
    conf = tmp_path / "importer.yaml"
    conf.write_text("site: oci\n")
    cfg = config.load({"CKIT_IMPORTER_CONFIG": str(conf), "USER": "alice"})
    assert cfg.cache == Path("/mnt/home/alice/ckit-images") and "site oci" in cfg.origin


@pytest.mark.parametrize(("text", "size"), [("500G", 500 * 1024**3), ("2T", 2 * 1024**4), ("10MiB", 10 * 1024**2),
                                            ("123", 123), (4096, 4096), ("0", 0)])
def test_sizes(text: str | int, size: int) -> None:
    assert config.parse_size(text) == size


def test_bad_size() -> None:
    with pytest.raises(ConfigError, match="not a size"):
        config.parse_size("lots")

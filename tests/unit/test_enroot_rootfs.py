"""Enroot rootfs files (/etc/rc, rc.local, fstab, environment) byte-exact to what enroot import writes."""

from __future__ import annotations

import shlex
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from buildkit.errors import ConvertError
from buildkit.image.model import ImageConfig, RootfsEntry, When
from buildkit.image.rootfs import enroot as E

PROV = "docker://registry-1.docker.io#library/ubuntu:24.04"

CONFIGS = {
    "cmd-only": ImageConfig(cmd=("/bin/bash",), env=("PATH=/usr/local/sbin:/usr/bin",)),
    "entrypoint-and-cmd": ImageConfig(
        entrypoint=("/opt/nvidia/nvidia_entrypoint.sh",), cmd=("python", "-c", "print('hi')"),
        working_dir="/workspace", labels=(("maintainer", "NVIDIA CORPORATION"), ("com.nvidia.build", "1\n2")),
        env=("CUDA_VERSION=12.4", "NVIDIA_VISIBLE_DEVICES=all"), volumes=("/data", "/cache")),
    "entrypoint-only": ImageConfig(entrypoint=("/bin/entry", "--flag"), labels=(("b", "2"), ("a", "1"))),
    "neither": ImageConfig(),
    "tricky": ImageConfig(entrypoint=("printf", "%s\n"), cmd=("it's", "", "tab\there", "$HOME `id`", "\\", "ünï €",
                                                               "'", "line1\nline2")),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_rc_golden(name: str, golden: Callable[[str, str], None]) -> None:
    golden(f"enroot/rc-{name}.sh", E.rc_text(CONFIGS[name], provenance=PROV))


def test_rc_exact_bytes_of_the_quirks() -> None:
    rc = E.rc_text(CONFIGS["neither"], provenance=PROV)
    assert rc == (
        f"# enroot-provenance: {PROV}\n\n"
        'mkdir -p "/" 2> /dev/null\ncd "/" && unset OLDPWD || exit 1\n\n'
        "if [ -s /etc/rc.local ]; then\n    . /etc/rc.local\nfi\n\n"
        'if [ $# -gt 0 ]; then\n    exec  "$@"\nelse\n    exec  \'/bin/sh\'\nfi\n')
    ep_only = E.rc_text(CONFIGS["entrypoint-only"], provenance=PROV)
    assert "    exec '/bin/entry' '--flag' \n" in ep_only  # empty CMD leaves a trailing space
    assert ep_only.startswith(f"# enroot-provenance: {PROV}\n# b 2\n# a 1\n\nmkdir")  # labels in input order
    nvidia = E.rc_text(CONFIGS["entrypoint-and-cmd"], provenance=PROV)
    assert "# com.nvidia.build 1 2\n" in nvidia
    assert 'cd "/workspace" && unset OLDPWD || exit 1\n' in nvidia
    assert "    exec '/opt/nvidia/nvidia_entrypoint.sh' 'python' '-c' 'print('\\''hi'\\'')'\n" in nvidia


def test_fstab_environment_and_rc_local() -> None:
    cfg = CONFIGS["entrypoint-and-cmd"]
    assert E.fstab_text(cfg) == (
        "${ENROOT_ROOTFS}/cache /cache none x-create=dir,bind,rw,nosuid,nodev\n"
        "${ENROOT_ROOTFS}/data /data none x-create=dir,bind,rw,nosuid,nodev\n")
    assert E.environment_text(cfg) == "CUDA_VERSION=12.4\nNVIDIA_VISIBLE_DEVICES=all\n"
    assert E.fstab_text(ImageConfig()) == "" and E.environment_text(ImageConfig()) == ""
    assert E.environment_text(ImageConfig(env=("NOVALUE", "X=${HOME}/a b"))) == "NOVALUE\nX=${HOME}/a b\n"


def test_entries_cover_the_four_files_and_the_workdir() -> None:
    got = E.entries(CONFIGS["entrypoint-and-cmd"], provenance=PROV)
    assert [(e.path, e.kind, e.mode, e.when) for e in got] == [
        ("/etc", "dir", 0o755, When.IF_ABSENT), ("/workspace", "dir", 0o755, When.IF_ABSENT),
        ("/etc/fstab", "file", 0o644, When.ALWAYS), ("/etc/environment", "file", 0o644, When.ALWAYS),
        ("/etc/rc", "file", 0o644, When.ALWAYS), ("/etc/rc.local", "file", 0o644, When.ALWAYS)]
    assert got[-1] == RootfsEntry("/etc/rc.local", "file", 0o644, E.RC_LOCAL)
    assert E.RC_LOCAL.count(b"\n") == 2
    deep = E.entries(ImageConfig(working_dir="/opt/work/"), provenance=PROV)
    assert [e.path for e in deep if e.kind == "dir"] == ["/etc", "/opt", "/opt/work"]


@pytest.mark.parametrize(("value", "quoted"), [
    ("", "''"), ("'", "\\'"), ("a'b", "'a'\\''b'"), ("tab\there", "$'tab\\there'"), ("é€", "'é€'"),
    ("\x01\x7f", "$'\\001\\177'"), ("a\nb'c\\", "$'a\\nb\\'c\\\\'"), ("\x1b", "$'\\E'"), ("\u2028", "$'\\342\\200\\250'"),
    ("$HOME `x`", "'$HOME `x`'")])
def test_bash_quote_matches_bash_at_q(value: str, quoted: str) -> None:
    assert E.bash_quote(value) == quoted


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc", "Cn", "Zl", "Zp"))))
def test_bash_quote_of_printable_text_round_trips_through_posix_quoting(value: str) -> None:
    assert shlex.split(E.bash_quote(value)) == [value]


@pytest.mark.parametrize(("config", "message"), [
    (ImageConfig(env=("A=1\n2",)), "ENV variable 'A' has a value with a line break"),
    (ImageConfig(cmd=("a\0b",)), "NUL character"),
    (ImageConfig(working_dir='/x"y'), "WorkingDir '/x\"y' contains"),
    (ImageConfig(working_dir="/a/../b"), "absolute path without '..'"),
    (ImageConfig(working_dir="rel"), "absolute path"),
    (ImageConfig(volumes=("/my data",)), "cannot be written to /etc/fstab"),
])
def test_values_enroot_would_mangle_are_rejected(config: ImageConfig, message: str) -> None:
    with pytest.raises(ConvertError, match=message.replace("(", r"\(").replace("'", "'")):
        E.entries(config, provenance=PROV)


def test_provenance_must_be_one_line() -> None:
    with pytest.raises(ConvertError, match="must be one line"):
        E.rc_text(ImageConfig(), provenance="docker://x\nrm -rf /")

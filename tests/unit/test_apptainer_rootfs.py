"""The /.singularity.d additions of a docker-derived SIF (as apptainer builds them)."""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from buildkit.errors import CkitError, ConvertError
from buildkit.image.model import ImageConfig, When
from buildkit.image.rootfs import apptainer as A
from buildkit.image.rootfs.apptainer_scripts import FIXED_SCRIPTS
from buildkit.image.rootfs.gotemplate import render

DEFFILE = "bootstrap: docker\nfrom: busybox:1.36\n\n"
RUNSCRIPT_CASES = {
    "cmd-only": ImageConfig(cmd=("sh",)),
    "entrypoint-and-cmd": ImageConfig(entrypoint=("/entry.sh", "--flag"), cmd=("python", "-V")),
    "entrypoint-only": ImageConfig(entrypoint=("/entry.sh",)),
    "neither": ImageConfig(),
    "tricky": ImageConfig(entrypoint=("printf", "%s\n"), cmd=("it's", "", "$HOME", "`id`", "a\\b", 'q"q', "l1\nl2")),
}


@pytest.mark.parametrize("name", sorted(RUNSCRIPT_CASES))
def test_runscript_golden(name: str, golden: Callable[[str, str], None]) -> None:
    golden(f"apptainer/runscript-{name}.sh", A.runscript(RUNSCRIPT_CASES[name]))


def test_runscript_header_lines_use_argsquoted_and_single_quote_escaping() -> None:
    text = A.runscript(RUNSCRIPT_CASES["tricky"])
    assert text.startswith("#!/bin/sh\nOCI_ENTRYPOINT='\"printf\" \"%s\n\"'\n")
    assert "OCI_CMD='" + r'''"it'"'"'s" "" "\$HOME" "\`id\`" "a\\b" "q\"q" "l1''' + "\nl2\"'\n" in text
    assert "set -- 'it'\"'\"'s' \"$@\"\n" in text
    assert A.runscript(ImageConfig()).startswith("#!/bin/sh\nOCI_ENTRYPOINT=''\nOCI_CMD=''\n\n# When")


def test_escape_functions() -> None:
    assert A.escape('a\\b"c`d$e') == 'a\\\\b\\"c\\`d\\$e'
    assert A.escape_single_quotes("it's") == "it'\"'\"'s"
    assert A.args_quoted(("a b", "")) == '"a b" ""'


def test_docker_env_script() -> None:
    cfg = ImageConfig(env=("PATH=/opt/x/bin:/usr/bin", "LANG=C.UTF-8", "EMPTY=", "NOVALUE", "1BAD=x",
                           "BAD-NAME=y", 'Q=a"b$c`d\\e', "NL=a\nb"))
    assert A.docker_env_script(cfg) == (
        "#!/bin/sh\n"
        'export PATH="/opt/x/bin:/usr/bin"\n'
        'export LANG="${LANG:-"C.UTF-8"}"\n'
        'export EMPTY="${EMPTY:-""}"\n'
        'export NOVALUE="${NOVALUE:-}"\n'
        'export Q="${Q:-"a\\"b\\$c\\`d\\\\e"}"\n'
        'export NL="${NL:-"a\nb"}"\n')
    with pytest.raises(ConvertError, match="NUL"):
        A.docker_env_script(ImageConfig(env=("A=\0",)))


def test_labels_json_is_go_marshal_indent() -> None:
    cfg = ImageConfig(labels=(("z", "<&>"), ("a", "ünï"), ("org.label-schema.schema-version", "0.9")),
                      architecture="arm64")
    text = A.labels_json(cfg, deffile=DEFFILE, labels_extra={"org.opencontainers.image.base.name": "busybox:1.36"},
                         source_date_epoch=1700000000).decode()
    assert text == (
        "{\n"
        '\t"a": "ünï",\n'
        '\t"org.label-schema.build-arch": "arm64",\n'
        '\t"org.label-schema.build-date": "Tuesday_14_November_2023_22:13:20_UTC",\n'
        '\t"org.label-schema.schema-version": "1.0",\n'
        '\t"org.label-schema.usage.singularity.deffile.bootstrap": "docker",\n'
        '\t"org.label-schema.usage.singularity.deffile.from": "busybox:1.36",\n'
        '\t"org.opencontainers.image.architecture": "arm64",\n'
        '\t"org.opencontainers.image.base.name": "busybox:1.36",\n'
        '\t"org.opencontainers.image.created": "2023-11-14T22:13:20Z",\n'
        '\t"z": "\\u003c\\u0026\\u003e"\n'
        "}")
    assert A.go_json({}, indent="\t") == "{}"
    assert A.go_json({"k": "\u2028\x01\n"}) == '{"k":"\\u2028\\u0001\\n"}'
    stamp = A.build_labels(ImageConfig(), deffile="", source_date_epoch=1700000000 - 22 * 3600 - 13 * 60 - 19)
    assert stamp["org.label-schema.build-date"] == "Tuesday_14_November_2023_0:0:1_UTC".replace("0:0:1", "00:0:1")


def test_oci_config_json_is_go_marshal_of_v1_config() -> None:
    raw = {"Env": ["A=1"], "Cmd": ["sh"], "Labels": {"b": "2", "a": "<1>"}, "Volumes": {"/v": {}},
           "ExposedPorts": {"80/tcp": {}}, "WorkingDir": "", "Entrypoint": None, "Tty": False, "ArgsEscaped": True,
           "Healthcheck": {"Test": ["CMD", "true"], "Interval": 30000000000, "Retries": 0},
           "OnBuild": [], "user": "1000", "Unknown": 1}
    cfg = ImageConfig.from_image_config({"config": raw})
    assert A.oci_config_json(cfg) == (
        b'{"Cmd":["sh"],"Healthcheck":{"Test":["CMD","true"],"Interval":30000000000},"Env":["A=1"],'
        b'"Labels":{"a":"\\u003c1\\u003e","b":"2"},"User":"1000","Volumes":{"/v":{}},'
        b'"ExposedPorts":{"80/tcp":{}},"ArgsEscaped":true}')
    assert A.oci_config_json(ImageConfig()) == b"{}"


def test_entries_cover_the_documented_tree() -> None:
    got = A.entries(RUNSCRIPT_CASES["cmd-only"], deffile=DEFFILE, source_date_epoch=0)
    by_path = {e.path: e for e in got}
    assert len(by_path) == len(got)
    for d in ("/.singularity.d/libs", "/.singularity.d/actions", "/.singularity.d/env", "/dev", "/proc", "/root",
              "/var/tmp", "/tmp", "/etc", "/sys", "/home"):
        assert (by_path[d].kind, by_path[d].mode, by_path[d].when) == ("dir", 0o755, When.IF_ABSENT)
    assert {(e.path, e.target) for e in got if e.kind == "symlink"} == {
        ("/singularity", ".singularity.d/runscript"), ("/.run", ".singularity.d/actions/run"),
        ("/.exec", ".singularity.d/actions/exec"), ("/.test", ".singularity.d/actions/test"),
        ("/.shell", ".singularity.d/actions/shell"), ("/environment", ".singularity.d/env/90-environment.sh")}
    assert all(e.when is When.UNLESS_REGULAR for e in got if e.kind == "symlink")
    for path in ("/etc/hosts", "/etc/resolv.conf"):
        assert (by_path[path].data, by_path[path].mode, by_path[path].when) == (b"", 0o644, When.ALWAYS)
    scripts = [p for p, e in by_path.items() if e.kind == "file" and e.mode == 0o755]
    assert sorted(scripts) == sorted(
        [f"/.singularity.d/{p}" for p in FIXED_SCRIPTS] + ["/.singularity.d/runscript",
                                                           "/.singularity.d/env/10-docker2singularity.sh",
                                                           "/.singularity.d/env/94-appsbase.sh"])
    assert by_path["/.singularity.d/env/94-appsbase.sh"].data == b""
    assert by_path["/.singularity.d/Singularity"].data == DEFFILE.encode()
    assert json.loads(by_path["/.singularity.d/labels.json"].data)["org.opencontainers.image.created"] == \
        "1970-01-01T00:00:00Z"
    assert by_path["/.singularity.d/env/90-environment.sh"].data.endswith(
        b"# Custom environment shell code should follow\n")
    assert all(e.data.startswith(b"#!/bin/sh\n") for e in got if e.mode == 0o755 and e.data)
    assert all(b"Copyright" not in e.data and b"License" not in e.data for e in got)


@pytest.mark.parametrize(("template", "data", "out"), [
    ("a {{ .X }} b", {"X": "1"}, "a 1 b"),
    ("a\n  {{- if .X }}\n  yes\n  {{- else if .Y }}\n  y\n  {{- else }}\n  no\n  {{- end }}\nz", {"X": "", "Y": "1"},
     "a\n  y\nz"),
    ("a\n  {{- if .X }}\n  yes\n  {{- else }}\n  no\n  {{- end }}\nz", {"X": ""}, "a\n  no\nz"),
    ("{{ if .X -}}  x  {{- end }}", {"X": "1"}, "x"),
])
def test_gotemplate_render(template: str, data: dict[str, str], out: str) -> None:
    assert render(template, data) == out


def test_gotemplate_rejects_unknown_values_and_syntax() -> None:
    with pytest.raises(CkitError, match="unknown value"):
        render("{{ .Nope }}", {})
    with pytest.raises(CkitError, match="unclosed"):
        render("{{ if .X }}", {"X": "1"})
    with pytest.raises(CkitError, match="unsupported"):
        render("{{ range .X }}", {"X": "1"})


@given(st.lists(st.text(alphabet=st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)))))
def test_prepend_lines_rebuild_the_arguments(args: list[str]) -> None:
    words = shlex.split(A.prepend_lines(tuple(args)))
    assert len(words) == 4 * len(args)
    assert [words[i + 2] for i in range(0, len(words), 4)] == list(reversed(args))
    assert all(words[i:i + 2] == ["set", "--"] and words[i + 3] == "$@" for i in range(0, len(words), 4))


def posix_double_quoted(word: str) -> str:
    """The value of one POSIX ``"…"`` word without expansions: ``\\`` escapes only ``$ ` " \\`` and newline."""
    assert word[0] == word[-1] == '"'
    out, i, body = [], 0, word[1:-1]
    while i < len(body):
        char = body[i]
        assert char not in '"$`', f"unescaped {char!r} would end or expand the word"
        if char == "\\" and i + 1 < len(body) and body[i + 1] in '$`"\\\n':
            out.append("" if body[i + 1] == "\n" else body[i + 1])
            i += 2
            continue
        out.append(char)
        i += 1
    return "".join(out)


@given(st.text(alphabet=st.characters(blacklist_characters="\0", blacklist_categories=("Cs",))))
def test_args_quoted_round_trips_through_posix_double_quotes(value: str) -> None:
    assert posix_double_quoted(A.args_quoted((value,))) == value

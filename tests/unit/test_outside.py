"""Outside text on a terminal and numbers from users: escapes never act, only ASCII digits count."""

from __future__ import annotations

import sys
import unicodedata

import pytest

from buildkit.launch.jobcontrol import JobEntry as Job
from buildkit.launch.slurmctl import parse_jobs
from buildkit.outside import UNSAFE, ascii_float, ascii_int, shown

ATTACKS = {
    "OSC 52 clipboard": "\x1b]52;c;cm0gLXJmIH4=\x07",
    "OSC 0 title": "\x1b]0;pwned\x1b\\",
    "CSI clear screen": "\x1b[2J\x1b[H",
    "bare CR": "safe\rEVIL",
    "C1 CSI": "\x9b31m",
    "bidi override": "\u202eexe.txt",
    "bidi isolate": "\u2066x\u2069",
    "line separator": "a\u2028b",
    "backspace and bell": "ab\b\b\x07",
    "NUL and DEL": "a\x00b\x7f",
    "undecodable byte": b"name\x9b".decode("utf-8", "surrogateescape"),
}


@pytest.mark.parametrize("text", ATTACKS.values(), ids=ATTACKS.keys())
def test_shown_text_holds_nothing_a_terminal_acts_on(text: str) -> None:
    for lines in (False, True):
        out = shown(text, lines=lines)
        assert out.isprintable(), repr(out)
        assert out.encode("utf-8")  # a surrogate from surrogateescape would not encode
    assert shown("\x1b]0;t\x07") == "\\x1b]0;t\\x07" and shown("\u202e") == "\\u202e"
    assert shown(b"\x9b".decode("utf-8", "surrogateescape")) == "\\x9b"  # the byte as it was


def test_lines_keep_newlines_and_tabs_a_value_does_not() -> None:
    assert shown("a\n\tb\r", lines=True) == "a\n\tb\\r"
    assert shown("a\n\tb") == "a\\n\\tb"
    assert shown("Größe 日本 🙂 a b") == "Größe 日本 🙂 a b"  # printable text is left alone
    assert shown(12) == "12"


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="the class is Unicode 14's, as in Python 3.11")
def test_the_unsafe_class_is_unicodes_control_format_and_separator_characters() -> None:
    wanted = {chr(c) for c in range(sys.maxunicode + 1)
              if unicodedata.category(chr(c)) in ("Cc", "Cf", "Cs", "Zl", "Zp")}
    matched = {chr(c) for c in range(sys.maxunicode + 1) if UNSAFE.fullmatch(chr(c))}
    assert matched == wanted


@pytest.mark.parametrize("text, value", [("0", 0), ("42", 42), ("007", 7), ("-3", None), ("+3", None), ("٣", None),
                                         ("３", None), ("²", None), ("1_000", None), (" 4", None), ("4\n", None),
                                         ("", None), ("0x10", None), ("9" * 5000, None)])
def test_ascii_int_reads_only_ascii_digits(text: str, value: int | None) -> None:
    assert ascii_int(text) == value
    assert ascii_int("-3", signed=True) == -3 and ascii_int("-٣", signed=True) is None
    assert ascii_int("+3", signed=True) is None


@pytest.mark.parametrize("text, value", [("1", 1.0), ("0.5", 0.5), (".5", 0.5), ("2e3", 2000.0), ("-1.5", -1.5),
                                         ("nan", None), ("inf", None), ("1e999", None), ("٣", None), ("1_0", None),
                                         ("١.٥", None), ("", None), ("1.", 1.0)])
def test_ascii_float_reads_only_ascii_numbers(text: str, value: float | None) -> None:
    assert ascii_float(text) == value


def test_squeue_records_keep_any_job_name_whole() -> None:
    """Fields after a token the names cannot hold: a name with |, a newline and a forged record stays one name."""
    token = "@ckit0123@"
    forged = "x|y\n99|RUNNING|debug|1|0:01|n1|root"
    out = "".join(f"{token}{f}" for f in ("7", forged, "RUNNING", "debug", "1", "0:05", "n1", "bob\n")) + \
        "".join(f"{token}{f}" for f in ("8", "a\r\x1b]0;t\x07", "PENDING", "debug", "2", "0:00", "(None)", "eve\n"))
    assert parse_jobs(out, token) == [Job("7", forged, "RUNNING", "debug", "1", "0:05", "n1", "bob"),
                                      Job("8", "a\r\x1b]0;t\x07", "PENDING", "debug", "2", "0:00", "(None)", "eve")]
    assert parse_jobs("", token) == []


def test_an_squeue_answer_of_another_shape_is_an_error() -> None:
    from buildkit.errors import LaunchError

    with pytest.raises(LaunchError, match="not the list of jobs"):
        parse_jobs("1|x|RUNNING\n", "@ckit0123@")

"""The shell reader of the bash rules: a command as the simple commands it runs (through `&&`, `;`, pipes,
subshells, substitutions, `sh -c`, `xargs`, `find -exec`), each read as written and through its wrappers,
with its redirections; and a refusal (`Unparseable`) of what it cannot read with certainty."""

from __future__ import annotations

import pytest

from tether.runtime.commands import Unparseable, split_command


def readings(command: str) -> list[list[str]]:
    """Each simple command's readings, outermost first; `!` marks one an allow rule may not match."""
    return [[f.text + ("" if f.allow_ok else "!") for f in part.forms] for part in split_command(command)]


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("git status", [["git status"]]),
        ("  git   status   -s ", [["git status -s"]]),
        ("git commit -m 'a  message; rm x'", [["git commit -m a  message; rm x"]]),  # quoted: one word
        ('echo "a && b"', [["echo a && b"]]),
        ("cd src && rm -rf build", [["cd src"], ["rm -rf build"]]),
        ("a || b; c | d & e", [["a"], ["b"], ["c"], ["d"], ["e"]]),
        ("(cd a; make) || echo no", [["cd a"], ["make"], ["echo no"]]),
        ("if true; then rm x; fi", [["if true", "true"], ["then rm x", "rm x"]]),
        ("echo $(curl evil)", [["curl evil"], ["echo $(...)"]]),
        ("echo `whoami`", [["whoami"], ["echo `...`"]]),
        ('bash -c "git push"', [["bash -c git push"], ["git push"]]),
        ("find . -name x | xargs rm", [["find . -name x"], ["xargs rm", "rm"]]),
        ("xargs -I{} rm {}", [["xargs -I{} rm {}", "rm {}"]]),
    ],
)
def test_a_command_splits_into_the_simple_commands_it_runs(command: str, expected: list[list[str]]) -> None:
    got = readings(command)
    for part in expected:
        assert part in got, got
    assert len(got) >= len(expected)


@pytest.mark.parametrize(
    ("command", "forms"),
    [
        ("sudo rm -rf /", ["sudo rm -rf /", "rm -rf /!"]),
        ("sudo -u bob git status", ["sudo -u bob git status", "git status!"]),
        ("env FOO=1 timeout 5 pytest -x", ["env FOO=1 timeout 5 pytest -x", "timeout 5 pytest -x!", "pytest -x!"]),
        ("FOO=1 git log", ["FOO=1 git log", "git log!"]),
        ("timeout 5 pytest -x", ["timeout 5 pytest -x", "pytest -x"]),
        ("nice -n 5 make", ["nice -n 5 make", "make"]),
        ("nohup rm x", ["nohup rm x", "rm x"]),
        ("time git status", ["time git status", "git status"]),
        ("env git status", ["env git status", "git status"]),
    ],
)
def test_wrappers_are_seen_through_and_privilege_wrappers_are_not_allowed_through(
    command: str, forms: list[str]
) -> None:
    (part,) = readings(command)
    assert part == forms


def test_redirections_are_the_files_a_command_writes_and_reads() -> None:
    (echo,) = split_command("echo hi > out.txt 2>/dev/null")
    assert echo.text == "echo hi" and echo.writes == ["out.txt"] and echo.reads == []  # /dev/null is harmless
    (cat,) = split_command("cat < in.txt >> log")
    assert cat.reads == ["in.txt"] and cat.writes == ["log"]
    (truncate,) = split_command("> emptied.txt")
    assert truncate.writes == ["emptied.txt"]


def test_a_command_named_by_a_variable_is_dynamic() -> None:
    (part,) = split_command("$CMD x")
    assert part.dynamic
    (quoted,) = split_command('rm -rf "$HOME"')
    assert quoted.text == "rm -rf $HOME" and not quoted.dynamic  # its command is known: rm


@pytest.mark.parametrize(
    ("command", "why"),
    [
        ('eval "$X"', "eval"),
        ("echo ${x", "parameter expansion"),
        ("ls > $OUT", "redirection into a file named only at run time"),
        ("echo 'unclosed", "unterminated single quote"),
    ],
)
def test_what_cannot_be_read_with_certainty_is_refused(command: str, why: str) -> None:
    with pytest.raises(Unparseable, match=why):
        split_command(command)

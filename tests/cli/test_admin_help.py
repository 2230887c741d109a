"""``engram admin --help`` works on every level and lists every subcommand; each subcommand's
help names its options (nothing is contacted: help exits before any call)."""

from __future__ import annotations

import re

import pytest

from engram_cli.admin import main

COMMANDS = ("transition", "pending", "adjudicate", "reveal", "history", "verify-journal", "rebuild-projection",
            "enable", "disable", "show", "policy")


def help_of(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--help"])
    assert exited.value.code == 0
    return capsys.readouterr().out


def test_the_top_level_lists_every_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    listed = re.search(r"\{([a-z,-]+)\}", help_of(capsys))
    assert listed is not None and tuple(listed.group(1).split(",")) == COMMANDS


@pytest.mark.parametrize("command", COMMANDS)
def test_every_subcommand_has_help(capsys: pytest.CaptureFixture[str], command: str) -> None:
    shown = help_of(capsys, command)
    assert f"engram admin {command}" in shown and "--tenant" in shown and "--json" in shown


def test_a_missing_subcommand_or_option_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in ([], ["rebuild-projection", "--tenant", "t", "--workspace", "w"], ["nonsense"]):
        with pytest.raises(SystemExit) as exited:
            main(argv)
        assert exited.value.code == 2

"""The safe shell interpreter behind simulated containers (nothing runs on the host)."""

from __future__ import annotations

import math

import pytest

from actors.sim.shell import ContainerRun, plan_container, run_argv, run_script
from actors.sim.util import format_go_duration, parse_go_duration


def sh(script: str, *args: str, env: dict[str, str] | None = None) -> ContainerRun:
    return run_argv(["sh", "-c", script, *args], env)


@pytest.mark.parametrize(
    ("argv", "code", "out", "duration"),
    [
        (["sh", "-c", "echo branch-a; exit 0"], 0, "branch-a\n", 0),
        (["echo", "hello"], 0, "hello\n", 0),
        (["/bin/echo", "-n", "x"], 0, "x", 0),
        (["sleep", "5"], 0, "", 5),
        (["sleep", "1m", "30"], 0, "", 90),
        (["sleep", "nope"], 1, "sleep: invalid time interval 'nope'\n", 0),
        (["true"], 0, "", 0),
        (["false"], 1, "", 0),
        (["/usr/bin/python3", "main.py"], 0, "", 0),
        ([], 0, "", 0),
        (["bash", "-c", "exit 300"], 44, "", 0),
        (["sh", "-c"], 2, "sh: -c: option requires an argument\n", 0),
        (["busybox", "sh", "-c", "echo bb"], 0, "bb\n", 0),
        (["sh", "script.sh"], 0, "", 0),
    ],
)
def test_argv(argv: list[str], code: int, out: str, duration: float) -> None:
    run = run_argv(argv)
    assert (run.exit_code, run.stdout, run.duration) == (code, out, duration)


def test_sequencing_and_lists() -> None:
    assert sh("echo a; echo b\necho c").stdout == "a\nb\nc\n"
    assert sh("true && echo yes || echo no").stdout == "yes\n"
    assert sh("false && echo yes || echo no").stdout == "no\n"
    assert sh("false || false && echo x").stdout == ""
    assert sh("false; echo $?").stdout == "1\n"
    assert sh("exit 4; echo never").exit_code == 4
    assert sh("false").exit_code == 1
    assert sh("echo a & echo b").stdout == "a\nb\n"
    assert sh("! true").exit_code == 1
    assert sh("echo one \\\n two").stdout == "one two\n"
    assert sh("# comment\necho x # trailing").stdout == "x\n"


def test_set_e() -> None:
    assert sh("set -e; echo a; false; echo b").stdout == "a\n"
    assert sh("set -e; echo a; false; echo b").exit_code == 1
    # not for commands before && / || and not after !
    run = sh("set -e; false && true; ! true; false || true; echo end")
    assert (run.exit_code, run.stdout) == (0, "end\n")
    assert sh("set -eo pipefail; false | true; echo x").exit_code == 1
    assert run_argv(["sh", "-e", "-c", "false; echo no"]).stdout == ""
    assert sh("set -e; set +e; false; echo yes").stdout == "yes\n"


def test_timing_of_output() -> None:
    run = sh("echo a; sleep 2; echo b; sleep 0.5; echo c")
    assert run.duration == 2.5
    assert run.output == ((0.0, "a\n"), (2.0, "b\n"), (2.5, "c\n"))
    assert run.output_until(1) == "a\n"
    assert run.output_until(2) == "a\nb\n"
    assert sh("sleep infinity").duration == math.inf


def test_quotes_variables_and_expansion() -> None:
    env = {"NAME": "world", "EMPTY": ""}
    assert sh("echo \"hello $NAME\" '$NAME' ${NAME}!", env=env).stdout == "hello world $NAME world!\n"
    assert sh(
        'echo "${MISSING:-dflt}" "${EMPTY:-e}" "${EMPTY-u}" "${NAME:+set}" ${#NAME}', env=env
    ).stdout == ("dflt e  set 5\n")
    assert sh('X=1; Y="a b"; echo $X $Y').stdout == "1 a b\n"
    assert sh('export Z=9; echo "$Z"').stdout == "9\n"
    assert sh("A='x  y'; printf '[%s]' $A; echo").stdout == "[x][y]\n"  # field splitting
    assert sh("A='x  y'; printf '[%s]' \"$A\"; echo").stdout == "[x  y]\n"
    assert sh('echo "$(date)" `hostname` end').stdout == " end\n"  # substitutions are empty
    assert sh('echo $0 $1 "$#"', "name", "first").stdout == "name first 1\n"
    assert sh('echo "a\\"b" \\$x').stdout == 'a"b $x\n'
    assert sh("echo ''").stdout == "\n"
    assert sh('unset NAME; echo "[$NAME]"', env=env).stdout == "[]\n"


def test_echo_and_printf() -> None:
    assert sh("echo -e 'a\\tb\\nc'").stdout == "a\tb\nc\n"
    assert sh("echo 'a\\nb'").stdout == "a\\nb\n"
    assert sh("echo -ne 'x\\c'; echo y").stdout == "xy\n"
    assert sh("printf '%s=%d;' a 1 b 2").stdout == "a=1;b=2;"
    assert sh("printf '%5s|%-3d|%x|%%\\n' hi 7 255").stdout == "   hi|7  |ff|%\n"
    assert sh("printf 'no newline'").stdout == "no newline"
    assert sh("printf '%s\\n'").stdout == "\n"


def test_redirections() -> None:
    assert sh("echo out; echo err >&2").stdout == "out\nerr\n"  # logs hold both streams
    assert sh("echo gone > /tmp/file; echo kept").stdout == "kept\n"
    assert sh("echo gone >> log.txt 2>&1").stdout == ""
    assert sh("sleep x 2>/dev/null; echo $?").stdout == "1\n"
    assert sh("echo ok > /dev/stdout").stdout == "ok\n"
    assert sh("echo x &> /dev/null").stdout == ""


def test_pipelines_and_builtins() -> None:
    assert sh("echo piped | cat").stdout == "piped\n"
    assert sh("echo hidden | grep x").stdout == ""  # unknown program: no output
    assert sh("sleep 3 | sleep 1").duration == 3
    assert sh("exit 3 | true; echo $?").stdout == "0\n"  # pipeline members are subshells
    assert sh("[ 1 -lt 2 ] && echo lt").stdout == "lt\n"
    assert sh('[ "a" = "b" ] || echo ne').stdout == "ne\n"
    assert sh("test -z '' && test -n x && echo both").stdout == "both\n"
    assert sh("[ -f /etc/passwd ] || echo nofs").stdout == "nofs\n"
    assert sh("[ 1 -eq 1 -a 2 -eq 2 ] && echo and").stdout == "and\n"
    assert sh("sh -c 'echo inner; exit 5'; echo $?").stdout == "inner\n5\n"
    assert sh("exec sleep 2; echo never").duration == 2
    assert sh("cd /tmp; trap 'x' EXIT; :; echo fine").stdout == "fine\n"


def test_unsupported_syntax_is_harmless() -> None:
    run = sh("if true; then echo yes; else echo no; fi; echo after")
    assert (run.exit_code, run.stdout) == (0, "after\n")
    run = sh("for i in 1 2; do echo $i; done")
    assert run.exit_code == 0
    assert sh("(exit 0); echo sub").stdout == "sub\n"
    assert sh("(echo in; sleep 2; exit 3) || echo caught $?").stdout == "in\ncaught 3\n"
    assert sh("(echo a; sleep 2; echo b) | cat").output == ((0.0, "a\nb\n"),)
    assert sh("{ echo x; sleep 1; }; echo y").output == ((0.0, "x\n"), (1.0, "y\n"))
    assert run_script("echo 'unterminated").stdout == "unterminated\n"


def test_plan_container_annotations_and_env() -> None:
    container = {
        "name": "c",
        "image": "i",
        "command": ["sh", "-c"],
        "args": ["echo $GREETING; sleep 2"],
        "env": [{"name": "GREETING", "value": "hi"}],
    }
    run = plan_container(container)
    assert (run.exit_code, run.stdout, run.duration) == (0, "hi\n", 2)
    run = plan_container(container, {"sim.chaosflow.io/exit-code": "3", "sim.chaosflow.io/duration": "500ms"})
    assert (run.exit_code, run.stdout, run.duration) == (3, "hi\n", 0.5)
    run = plan_container(
        container, {"sim.chaosflow.io/duration.other": "9s", "sim.chaosflow.io/stdout.c": "x"}
    )
    assert (run.stdout, run.duration) == ("x", 2)
    run = plan_container(
        container, {"sim.chaosflow.io/exit-code": "nan", "sim.chaosflow.io/duration": "soon"}
    )
    assert (run.exit_code, run.duration) == (0, 2)  # bad values are ignored
    assert plan_container({"name": "c", "image": "i", "args": ["echo", "args only"]}).stdout == "args only\n"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("10s", 10),
        ("1m30s", 90),
        ("1h", 3600),
        ("500ms", 0.5),
        ("1.5s", 1.5),
        ("2h3m4s", 7384),
        ("0", 0),
        ("-1s", -1),
        ("250us", 0.00025),
        ("3", 3),
    ],
)
def test_go_durations(text: str, seconds: float) -> None:
    assert parse_go_duration(text) == pytest.approx(seconds)


def test_go_duration_errors_and_format() -> None:
    for bad in ("", "s", "1x", "1h-2m"):
        with pytest.raises(ValueError):
            parse_go_duration(bad)
    assert format_go_duration(90) == "1m30s"
    assert format_go_duration(0.5) == "500ms"
    assert format_go_duration(3600) == "1h0m0s"
    assert format_go_duration(0) == "0s"

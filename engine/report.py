"""Human-readable output: the final node tree of a workflow."""

from __future__ import annotations

from typing import TextIO

from rich.console import Console
from rich.tree import Tree

from engine.duration import format_duration
from engine.runtime import Node, WorkflowRun

_STYLE = {
    "Succeed": "green",
    "Failed": "bold red",
    "Running": "yellow",
    "Holding": "yellow",
    "WaitingForChild": "cyan",
    "WaitingForSchedule": "cyan",
    "Evaluating": "magenta",
    "Init": "dim",
}


def _label(node: Node) -> str:
    took = ""
    if node.start_time is not None and node.finish_time is not None:
        took = f" {format_duration(round(node.finish_time - node.start_time, 3))}"
    style = _STYLE.get(node.phase.value, "")
    msg = f" — {node.message}" if node.message else ""
    tags = ""
    if "exitFor" in node.state:
        tags += " [dim]\\[exit handler][/dim]"
    if "attempt" in node.state:
        tags += f" [dim]\\[attempt {node.state['attempt']}][/dim]"
    return f"{node.name} [dim]({node.kind})[/dim]{tags} [{style}]{node.phase.value}[/{style}]{took}{msg}"


def render_tree(run: WorkflowRun, out: TextIO) -> None:
    tty = out.isatty() if hasattr(out, "isatty") else False
    console = Console(file=out, highlight=False, soft_wrap=True, width=None if tty else 400)
    took = ""
    if run.start_time is not None and run.finish_time is not None:
        took = f" in {format_duration(round(run.finish_time - run.start_time, 3))}"
    style = _STYLE.get(run.phase.value, "")
    msg = f" — {run.message}" if run.message else ""
    root = Tree(f"Workflow [bold]{run.key}[/bold] [{style}]{run.phase.value}[/{style}]{took}{msg}")

    def add(parent: Tree, name: str) -> None:
        node = run.nodes[name]
        branch = parent.add(_label(node))
        for c in node.children:
            add(branch, c)

    if run.entry_node is not None:
        add(root, run.entry_node)
    if run.exit_node is not None and run.exit_node in run.nodes:
        add(root, run.exit_node)  # the workflow's onExit handler
    console.print(root)

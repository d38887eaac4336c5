"""`command`: any shell command as the agent, in the sandbox, in the workspace, for the window.

The command is a template: {instructions} expands to the path of the rendered instructions
file inside the sandbox, {window_s} to the window in seconds.
"""

import shlex

from ai4ai.agents.base import AgentContext, AgentOutcome


def run(ctx: AgentContext) -> AgentOutcome:
    template = ctx.config.get("command")
    if not template:
        raise ValueError("agent=command needs agent.command='...'")
    (ctx.workspace / "INSTRUCTIONS.md").write_text(ctx.instructions)
    ws = ctx.sandbox.path("/workspace")
    cmd = str(template).format(
        instructions=shlex.quote(f"{ws}/INSTRUCTIONS.md"), window_s=int(ctx.window_s), workspace=shlex.quote(ws)
    )
    out = ctx.sandbox.run(["/bin/sh", "-c", cmd], "/workspace", ctx.window_s, ctx.log_path)
    return AgentOutcome(exit_code=out.returncode, timed_out=out.timed_out, wall_s=out.wall_s)

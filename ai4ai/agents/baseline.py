"""`baseline`: changes nothing, so the shipped algorithm is graded (scores 0.1 within noise)."""

from ai4ai.agents.base import AgentContext, AgentOutcome


def run(ctx: AgentContext) -> AgentOutcome:
    ctx.log_path.write_text("baseline agent: no changes\n")
    return AgentOutcome(exit_code=0, timed_out=False, wall_s=0.0)

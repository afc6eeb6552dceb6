"""A scripted example agent for kiln_bridge.py: it keeps the parent's code and tries other template
parameters, drawn from task.yaml's `params` with the request's seed (so a retried job proposes the same
thing). Replace `propose` with your own: call a model, run a search, read request.parent_eval_log...

    python3 kiln_bridge.py --endpoint tcp://127.0.0.1:5557 --server-key .kiln/broker.pub \\
        --key mybridge.key --agent example_agent.py
"""

import random

from kiln_bridge import Proposal, ProposalRequest


def propose(request: ProposalRequest) -> Proposal:
    space = request.task.get("params", {})
    rng = random.Random(request.seed * 1000003 + request.proposal_index)
    params = request.parent_params
    for name, values in sorted(space.items()):
        if values:
            params[name] = rng.choice(values)
    return Proposal(code=request.parent_code, params=params,
                    notes="example agent: parameters %s" % ", ".join("%s=%s" % kv for kv in sorted(params.items())))


def fixed_region(request: ProposalRequest) -> Proposal:
    """Returns the parent's editable regions unchanged, as bodies for Kiln to splice into the task's
    kernel: the smallest valid answer (use --agent example_agent.py:fixed_region)."""
    return Proposal(regions=request.regions(), notes="example agent: the parent's regions")

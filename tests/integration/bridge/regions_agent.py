"""A scripted agent for the region rules (bridge_test.cc, task two_regions/): by proposal index,

1. the whole file with a harmless comment added outside the regions: Kiln must score it 0;
2. only the bodies of both regions: Kiln splices them into the task's kernel;
3. the whole file with both regions rewritten: kept as it is.
"""

from kiln_bridge import Proposal, ProposalRequest

ELEMENT = "static float scaled(float alpha, float x) { return x * alpha; }  // proposal %d\n"
LOOP = "  for (long i = n - 1; i >= 0; --i) y[i] = scaled(alpha, x[i]);  // proposal %d\n"
OUTSIDE = "// a harmless comment, but outside the editable regions\n"


def propose(request: ProposalRequest) -> Proposal:
    k = request.proposal_index
    if k == 1:
        return Proposal(code=request.parent_code.replace('extern "C"', OUTSIDE + 'extern "C"'), notes="outside")
    bodies = [ELEMENT % k, LOOP % k]
    if k == 2:
        return Proposal(regions=bodies, notes="bodies")
    # Every region replaced: the rest of the parent's file is the task's kernel, whichever the parent.
    return Proposal(code=request.with_regions(bodies), notes="whole file")

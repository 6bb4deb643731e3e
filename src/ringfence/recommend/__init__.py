"""Which layer per class and link, at what cost, and why (``ringfence recommend``)."""

from ringfence.recommend.engine import Recommendation, measured_costs, recommend
from ringfence.recommend.priors import PRIORS, Cost, Option

__all__ = ["PRIORS", "Cost", "Option", "Recommendation", "measured_costs", "recommend"]

"""``GET /dashboard``: the live leaderboard as a self-contained page.

- ``view``: the leaderboard's rows per model, with traffic share, Pareto frontier and routing choice;
- ``chart``: the tokens/s against TTFT scatter, as inline SVG;
- ``page``: the HTML document (inline CSS from ``page.css``, the refresh script from ``page.js``);
- ``endpoint``: the Starlette endpoint, its access rule, and ``routing_choices``, the seam the
  router feeds.
"""

from gateway.dashboard.endpoint import dashboard, root, routing_choices
from gateway.dashboard.view import RoutingChoice, pareto_frontier

__all__ = ["RoutingChoice", "dashboard", "pareto_frontier", "root", "routing_choices"]

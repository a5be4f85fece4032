"""Dollar budgets and spend: per key and per team, reserved before a request is sent, settled after.

``windows`` (UTC calendar periods, nano-dollars), ``store`` (the protocol and the in-memory
backend), ``redis_store`` (shared by replicas), ``factory`` (the store a config asks for),
``ledger`` (reserve and settle for a request), ``report`` (the spend endpoint's and the CLI's
rows), ``metrics`` (Prometheus series).
"""

from gateway.admission.spending.ledger import Spender, SpendLedger, worst_case_usd
from gateway.admission.spending.store import InMemorySpendStore, SpendStore
from gateway.admission.spending.windows import BUDGET_WINDOWS, Budget, BudgetWindow

__all__ = [
    "BUDGET_WINDOWS",
    "Budget",
    "BudgetWindow",
    "InMemorySpendStore",
    "SpendLedger",
    "SpendStore",
    "Spender",
    "worst_case_usd",
]

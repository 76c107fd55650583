"""Every rule Saturn knows, by family, plus user rules (checked before they are used)."""
from __future__ import annotations

import dataclasses
import importlib

from rewrites.pattern import Rule

# family name -> module with a RULES list; order is the order of the saturation phases
FAMILY_MODULES = {
    "algebra": "rewrites.algebra",
    "reduction": "rewrites.reduction",
    "online_softmax": "rewrites.online_softmax",
    "fusion": "rewrites.fusion",
    "matmul": "rewrites.matmul",
    "kernels": "rewrites.kernels",
}
_user_rules: list[Rule] = []


class UnsoundRule(ValueError):
    """A rule whose two sides disagree on some input (the message shows the counterexample)."""


def family_rules(family: str, include_unstable: bool = False) -> list[Rule]:
    """The rules of `family` the search uses; with `include_unstable`, also those marked
    numerically unstable (exact over the reals, kept out of the default search)."""
    if family == "user":
        rules = list(_user_rules)
    else:
        try:
            rules = list(importlib.import_module(FAMILY_MODULES[family]).RULES)
        except ModuleNotFoundError:
            return []
    return rules if include_unstable else [r for r in rules if not r.unstable]


def families() -> list[str]:
    return list(FAMILY_MODULES) + (["user"] if _user_rules else [])


def all_rules() -> list[Rule]:
    """Every rule, unstable ones included (all are checked)."""
    return [r for f in families() for r in family_rules(f, include_unstable=True)]


def register(rule: Rule, *, check: bool = True, trials: int = 20) -> Rule:
    """Add a user rule to the search after checking it on random inputs (raises UnsoundRule)."""
    from rewrites.check import check_rule
    if rule.family != "user":
        rule = dataclasses.replace(rule, family="user")
    if check:
        result = check_rule(rule, trials=trials)
        if not result.ok:
            raise UnsoundRule(f"rule {rule.name} is unsound: {result.message}")
    unregister(rule.name)
    _user_rules.append(rule)
    return rule


def unregister(name: str) -> None:
    _user_rules[:] = [r for r in _user_rules if r.name != name]

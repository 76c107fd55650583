"""Rewrite rules as data (rewrites.pattern), one family per file, checked by rewrites.check;
rewrites.bridge is the only module that talks to egglog."""
from rewrites.pattern import Rule
from rewrites.registry import UnsoundRule, all_rules, families, family_rules, register, unregister

__all__ = ["Rule", "register", "unregister", "all_rules", "families", "family_rules", "UnsoundRule"]

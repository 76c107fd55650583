"""Primitive IR: ops, dtypes, views, hash-consed nodes, graphs and the reference interpreter."""
from ir.dtypes import DType, dtypes, as_dtype, promote
from ir.graph import Graph, toposort
from ir.node import Node, IRError
from ir.ops import Op
from ir.view import ShapeTracker, View

__all__ = ["DType", "dtypes", "as_dtype", "promote", "Graph", "toposort", "Node", "IRError",
           "Op", "ShapeTracker", "View"]

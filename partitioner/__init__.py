"""Cost-model-driven kernel-fusion partitioner.

The public API::

    graph = partitioner.load_graph("graphs/gpt2_2l_b8_s1024_f16.yaml")
    plan = partitioner.partition(graph, strategy="ilp", hardware="h100", time_limit=None)
    plan.groups, plan.cost.modeled_time_us, plan.to_json()
    partitioner.evaluate(graph, [["a", "b"], ["c"]], "h100")   # any partition, or IllegalPlan
    partitioner.run_reference(graph)                           # NumPy execution, every tensor
"""

from .errors import GraphError, HardwareError, IllegalPlan
from .graph import Graph, Op
from .hardware import PROFILES, Hardware, load_hardware
from .loader import load_graph
from .ops import TensorType
from .plan import Plan, PlanCost, SolverInfo, evaluate
from .reference import run_reference
from .strategies import STRATEGIES, compare, partition

__version__ = "0.1.0"

__all__ = [
    "Graph", "GraphError", "Hardware", "HardwareError", "IllegalPlan", "Op", "PROFILES", "Plan", "PlanCost",
    "STRATEGIES", "SolverInfo", "TensorType", "compare", "evaluate", "load_graph", "load_hardware", "partition",
    "run_reference", "__version__",
]

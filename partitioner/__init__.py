"""Cost-model-driven kernel-fusion partitioner.

The public API::

    graph = partitioner.load_graph("graphs/gpt2_2l_b8_s1024_f16.yaml")
    plan = partitioner.partition(graph, strategy="ilp", hardware="h100", time_limit=None)
    plan.groups, plan.cost.modeled_time_us, plan.to_json()
    partitioner.evaluate(graph, [["a", "b"], ["c"]], "h100")   # any partition, or IllegalPlan
    partitioner.run_reference(graph)                           # NumPy execution, every tensor
    partitioner.from_onnx("model.onnx"), partitioner.from_torch(module, example_inputs)   # importers
"""

from .errors import GraphError, HardwareError, IllegalPlan
from .graph import Graph, Op
from .hardware import PROFILES, Hardware, load_hardware
from .importers import extra as importer  # imports onnx or torch only when called
from .loader import load_graph
from .ops import TensorType
from .plan import Plan, PlanCost, SolverInfo, evaluate
from .reference import run_reference
from .strategies import STRATEGIES, compare, partition

__version__ = "0.1.0"


def from_onnx(model, dims: dict[str, int] | None = None, *, name: str | None = None, verbose: bool = True) -> Graph:
    """Import an ONNX model (a ``.onnx`` path or a ``ModelProto``) as a :class:`Graph`.

    ``dims`` binds the model's dynamic dimensions by name (``{"batch": 8}``); the
    import summary is printed on stderr unless ``verbose`` is false. Initializers
    become graph inputs; their data is never read. See ``docs/importers.md``.

    Raises:
        GraphError: an unreadable model, an unbound or unknown dimension, a dtype
            format v1 lacks (one line naming the file, the op and the problem).
        ImportError: the ``onnx`` extra is not installed.
    """
    return importer("onnx").load(model, dims, name=name, verbose=verbose)


def from_torch(program, example_inputs=None, *, name: str | None = None, verbose: bool = True) -> Graph:
    """Import a ``torch.export`` program, or export ``program(*example_inputs)`` first
    when it is a ``torch.nn.Module``, lowered to core ATen, as a :class:`Graph`.

    Parameters and buffers keep their qualified names; the module's inputs are
    ``input_0``, ``input_1``, ... The summary is printed on stderr unless
    ``verbose`` is false. See ``docs/importers.md``.

    Raises:
        GraphError: a dtype format v1 lacks, or a symbolic dimension.
        ImportError: the ``torch`` extra is not installed.
    """
    return importer("torch").load(program, example_inputs, name=name, verbose=verbose)


__all__ = [
    "Graph", "GraphError", "Hardware", "HardwareError", "IllegalPlan", "Op", "PROFILES", "Plan", "PlanCost",
    "STRATEGIES", "SolverInfo", "TensorType", "compare", "evaluate", "from_onnx", "from_torch", "load_graph",
    "load_hardware", "partition", "run_reference", "__version__",
]

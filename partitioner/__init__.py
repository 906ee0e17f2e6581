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
    """Import an ONNX model as a :class:`Graph`.

    Initializers become graph inputs; their data is never read. An op that cannot
    be mapped becomes a ``custom`` op. See ``docs/importers.md``.

    Parameters
    ----------
    model : str, os.PathLike or onnx.ModelProto
        A ``.onnx`` file or a loaded model.
    dims : dict of str to int, optional
        Binds the model's dynamic dimensions by name (``{"batch": 8}``).
    name : str, optional
        The graph's name (default: the model's).
    verbose : bool
        Print the import summary (ops mapped, folded, custom by kind) on stderr.

    Returns
    -------
    Graph
        As from :func:`load_graph`.

    Raises
    ------
    GraphError
        An unreadable model, an unbound or unknown dimension, a dtype format v1
        lacks (one line naming the file, the op and the problem).
    ImportError
        The ``onnx`` extra is not installed.

    Examples
    --------
    >>> from onnx import TensorProto, helper
    >>> x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])
    >>> y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16])
    >>> model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "tiny", [x], [y]))
    >>> g = from_onnx(model, {"batch": 8}, verbose=False)
    >>> g.name, list(g.ops), g.tensor("y").shape
    ('tiny', ['y'], (8, 16))
    """
    return importer("onnx").load(model, dims, name=name, verbose=verbose)


def from_torch(program, example_inputs=None, *, name: str | None = None, verbose: bool = True) -> Graph:
    """Import a ``torch.export`` program, lowered to core ATen, as a :class:`Graph`.

    Parameters and buffers keep their qualified names; the module's inputs are
    ``input_0``, ``input_1``, ... See ``docs/importers.md``.

    Parameters
    ----------
    program : torch.export.ExportedProgram or torch.nn.Module
        A module is exported first as ``program(*example_inputs)``.
    example_inputs : tuple of torch.Tensor, optional
        Required for a module.
    name : str, optional
        The graph's name (default: the module's class name).
    verbose : bool
        Print the import summary on stderr.

    Returns
    -------
    Graph
        As from :func:`load_graph`.

    Raises
    ------
    GraphError
        A dtype format v1 lacks, or a symbolic dimension.
    ImportError
        The ``torch`` extra is not installed.

    Examples
    --------
    >>> import torch
    >>> g = from_torch(torch.nn.Linear(64, 32), (torch.randn(8, 64),), verbose=False)
    >>> g.name, [op.kind for op in g.ops.values()], list(g.inputs)
    ('Linear', ['transpose', 'matmul', 'add'], ['weight', 'bias', 'input_0'])
    """
    return importer("torch").load(program, example_inputs, name=name, verbose=verbose)


__all__ = [
    "Graph", "GraphError", "Hardware", "HardwareError", "IllegalPlan", "Op", "PROFILES", "Plan", "PlanCost",
    "STRATEGIES", "SolverInfo", "TensorType", "compare", "evaluate", "from_onnx", "from_torch", "load_graph",
    "load_hardware", "partition", "run_reference", "__version__",
]

"""IPython magics: ``%load_ext interp_widgets`` registers ``%%monitor`` and ``%explain``.

``%%monitor MODEL --layers 2,4 [--rank 8] [--every N] [--total-steps N] [--optimizer NAME] [-o NAME]`` runs the
cell's training loop under an :class:`~interp_widgets.geometry.AnisotropyMonitor` on the model held by the variable
``MODEL``. The live monitor view shows above the cell's output and updates while the cell runs. Steps are picked up
before every ``optimizer.step()`` of an optimizer that trains the model (torch's global optimizer step hooks), or of the
one named by ``--optimizer``. ``-o NAME`` stores the monitor's :class:`~interp_widgets.geometry.GeometryLog` in the
variable ``NAME``, even when the cell fails. Every hook is removed when the cell ends, by an error or by Ctrl-C.

``%explain MODEL TOKENIZER "text" [--method ig] [--granularity word] [--target T] [-o NAME]`` displays the
attribution view of one text.

Example:
    >>> from IPython.testing.globalipapp import get_ipython
    >>> shell = get_ipython()
    >>> load_ipython_extension(shell)  # what %load_ext interp_widgets does
    >>> shell.user_ns.update(model=model, tokenizer=tokenizer)
    >>> result = shell.run_line_magic("explain", 'model tokenizer "Not bad at all." --method saliency')
    >>> result.method, result.tokens[:3]
    ('saliency', ['[CLS]', 'Not', 'bad'])
"""

from __future__ import annotations

import shlex
from contextlib import contextmanager

from interp_widgets.registry import UnknownNameError

#: Short names accepted by ``%explain --method`` beside the registered method names.
METHOD_ALIASES = {
    "ig": "integrated_gradients",
    "ixg": "input_x_gradient",
    "grad": "saliency",
    "lime": "lime",
    "shap": "kernel_shap",
}


def _usage_error(message: str):
    from IPython.core.error import UsageError

    return UsageError(message)


def _lookup(shell, name: str, what: str, kind=None, hint: str = ""):
    """The user variable ``name``, checked to be a ``kind`` (a clear UsageError otherwise)."""
    if name not in shell.user_ns:
        raise _usage_error(f"no variable named {name!r} in the notebook; {what} must be the name of a variable")
    value = shell.user_ns[name]
    if kind is not None and not isinstance(value, kind):
        raise _usage_error(
            f"{name!r} is a {type(value).__name__}, not a {kind.__module__}.{kind.__qualname__}; "
            f"{hint or what + ' must name one'}"
        )
    return value


def _parse_layers(text: str, model) -> list:
    """``"2,4"`` -> block indices of a Hugging Face model (module paths of any other module); names pass through."""
    layers = []
    blocks = hasattr(model, "config")
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        layers.append(int(part) if blocks and part.lstrip("-").isdigit() else part)
    if not layers:
        raise _usage_error("--layers needs at least one layer, e.g. --layers 2,4 or --layers layer:2")
    return layers


def _argument_parser(**kwargs):
    """An argparse parser whose errors are UsageErrors with argparse's message (it would print and exit)."""
    import argparse

    class MagicArgumentParser(argparse.ArgumentParser):
        def error(self, message):
            raise _usage_error(f"{self.prog}: {message}; usage: {self.format_usage().strip()}")

    return MagicArgumentParser(add_help=False, exit_on_error=False, **kwargs)


def _monitor_parser():
    parser = _argument_parser(prog="%%monitor", description="Run the cell's training loop under an AnisotropyMonitor.")
    parser.add_argument("model")
    parser.add_argument("--layers", required=True)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--every", type=int, default=1)
    parser.add_argument("--n-controls", type=int, default=20)
    parser.add_argument("--total-steps", type=int, default=None)
    parser.add_argument("--refit-every", type=int, default=None)
    parser.add_argument("--optimizer", default=None)
    parser.add_argument("-o", "--output", default=None)
    return parser


def _explain_parser():
    parser = _argument_parser(prog="%explain", description="Display the attribution view of one text.")
    parser.add_argument("model")
    parser.add_argument("tokenizer")
    parser.add_argument("text")
    parser.add_argument("--method", default="integrated_gradients")
    parser.add_argument("--granularity", default="token")
    parser.add_argument("--target", default=None)
    parser.add_argument("-o", "--output", default=None)
    return parser


def _parse(parser, line: str):
    import argparse

    try:
        words = shlex.split(line)
    except ValueError as err:
        raise _usage_error(f"{parser.prog}: {err} (close the quotes around the text)") from None
    try:
        args, extra = parser.parse_known_args(words)
    except argparse.ArgumentError as err:
        raise _usage_error(f"{parser.prog}: {err}; usage: {parser.format_usage().strip()}") from None
    if extra:
        raise _usage_error(
            f"{parser.prog}: unknown arguments {' '.join(extra)}; usage: {parser.format_usage().strip()}"
        )
    return args


@contextmanager
def _global_optimizer_steps(monitor):
    """Record ``monitor``'s step before every ``optimizer.step()`` of an optimizer holding the model's parameters."""
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    own = {id(p) for p in monitor.model.parameters()}

    def before_step(optimizer, args, kwargs):
        if any(id(p) in own for group in optimizer.param_groups for p in group["params"]):
            monitor.step()

    handle = register_optimizer_step_pre_hook(before_step)
    try:
        yield
    finally:
        handle.remove()


def monitor_cell(shell, line: str, cell: str):
    """The ``%%monitor`` cell magic: run ``cell`` under an AnisotropyMonitor; returns nothing (``-o`` stores the log).

    Example:
        >>> from IPython.testing.globalipapp import get_ipython
        >>> shell = get_ipython(); load_ipython_extension(shell)
        >>> shell.user_ns.update(torch=torch, net=torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Tanh()))
        >>> import contextlib, io
        >>> with contextlib.redirect_stdout(io.StringIO()):  # outside a notebook the live view prints its repr
        ...     shell.run_cell_magic("monitor", "net --layers 0 --rank 2 --n-controls 3 --total-steps 4 -o log", '''
        ... opt = torch.optim.SGD(net.parameters(), lr=0.1)
        ... for step in range(4):
        ...     net(torch.randn(64, 16)).pow(2).mean().backward()
        ...     opt.step(); opt.zero_grad()
        ... ''')
        >>> shell.user_ns["log"].steps.tolist(), len(shell.user_ns["net"][0]._forward_hooks)
        ([0, 1, 2, 3], 0)
    """
    import torch
    from IPython.display import display

    from interp_widgets.geometry import AnisotropyMonitor

    args = _parse(_monitor_parser(), line)
    model = _lookup(
        shell,
        args.model,
        "MODEL",
        torch.nn.Module,
        "%%monitor needs the variable that holds the model being trained, e.g. %%monitor model --layers 2",
    )
    optimizer = None
    if args.optimizer is not None:
        optimizer = _lookup(
            shell,
            args.optimizer,
            "--optimizer",
            torch.optim.Optimizer,
            "--optimizer must name the optimizer variable, e.g. --optimizer opt",
        )
    schedule = (
        {"fit": "early", "total_steps": args.total_steps}
        if args.total_steps is not None
        else {"fit": "refit", "refit_every": args.refit_every or 50}
    )
    try:
        monitor = AnisotropyMonitor(
            model,
            _parse_layers(args.layers, model),
            rank=args.rank,
            every=args.every,
            n_controls=args.n_controls,
            optimizer=optimizer,
            **schedule,
        )
    except (TypeError, ValueError, KeyError, LookupError) as err:
        raise _usage_error(f"%%monitor: {err}") from None
    display(monitor.widget())
    try:
        with monitor:
            if optimizer is None:
                with _global_optimizer_steps(monitor):
                    shell.ex(cell)
            else:
                shell.ex(cell)
    finally:  # the record of a failed or interrupted cell is kept
        if args.output:
            shell.user_ns[args.output] = monitor.history


def explain_line(shell, line: str):
    """The ``%explain`` line magic: attribute one text and return the result (displayed as its view).

    Example:
        >>> from IPython.testing.globalipapp import get_ipython
        >>> shell = get_ipython(); load_ipython_extension(shell)
        >>> shell.user_ns.update(model=model, tokenizer=tokenizer)
        >>> explain_line(shell, 'model tokenizer "Not bad." --method ixg --granularity word -o r').method
        'input_x_gradient'
        >>> shell.user_ns["r"].granularity
        'word'
    """
    from interp_widgets.attribution import attribute, list_methods

    args = _parse(_explain_parser(), line)
    model = _lookup(shell, args.model, "MODEL")
    tokenizer = _lookup(shell, args.tokenizer, "TOKENIZER")
    method = METHOD_ALIASES.get(args.method, args.method)
    target = args.target
    if target is not None and target.lstrip("-").isdigit():
        target = int(target)
    try:
        result = attribute(model, tokenizer, args.text, method=method, target=target, granularity=args.granularity)
    except UnknownNameError:
        names = ", ".join(m.name for m in list_methods())
        raise _usage_error(
            f"%explain: unknown method {args.method!r}; use one of {names} "
            f"(or the short names {', '.join(METHOD_ALIASES)})"
        ) from None
    if args.output:
        shell.user_ns[args.output] = result
    return result


def load_ipython_extension(shell) -> None:
    """Register ``%%monitor`` and ``%explain`` (what ``%load_ext interp_widgets`` calls).

    Example:
        >>> from IPython.testing.globalipapp import get_ipython
        >>> shell = get_ipython(); load_ipython_extension(shell)
        >>> sorted(name for name in ("monitor", "explain") if name in shell.magics_manager.magics["cell"]
        ...        or name in shell.magics_manager.magics["line"])
        ['explain', 'monitor']
    """

    def monitor(line, cell):
        return monitor_cell(shell, line, cell)

    def explain(line):
        return explain_line(shell, line)

    monitor.__doc__, explain.__doc__ = monitor_cell.__doc__, explain_line.__doc__
    shell.register_magic_function(monitor, "cell", "monitor")
    shell.register_magic_function(explain, "line", "explain")

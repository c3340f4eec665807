"""Entries that take one token dim (``[T, m, H]``) called with the contract's leading dims.

The mHC contract allows any leading dims before ``[m, H]``; vendor kernels that index a flat
token dim (SGLang's, vLLM's TileLang ones) get them flattened and their outputs restored, a
calling convention, never a re-pack: 3-D inputs, views included, pass as given.
"""

from __future__ import annotations

from harness.adapters.signature import contract_signature

TOKEN_DIMS = {"residual": 2, "x": 1, "post_layer_mix": 2, "comb_res_mix": 2,
              "hidden_states": 2}
"""Contract arguments with leading token dims, and how many trailing dims each keeps."""


def token_flattened(op: str, call):
    """``call`` (a contract function of an entry that takes ``[T, m, H]``) given other leading
    dims flattened, its outputs restored to them. 3-D inputs pass as given (views included)."""
    contract = contract_signature(op)
    first = next(n for n in contract.parameters if n in TOKEN_DIMS)

    def flat(*args, **kwargs):
        bound = contract.bind(*args, **kwargs)
        lead_dims = bound.arguments[first].dim() - TOKEN_DIMS[first]
        if lead_dims == 1:
            return call(*bound.args, **bound.kwargs)
        lead = bound.arguments[first].shape[:lead_dims]
        for name, keep in TOKEN_DIMS.items():
            if name in bound.arguments:
                value = bound.arguments[name]
                bound.arguments[name] = value.reshape(-1, *value.shape[value.dim() - keep:])
        out = call(*bound.args, **bound.kwargs)
        outs = out if isinstance(out, tuple) else (out,)
        restored = tuple(o.reshape(*lead, *o.shape[1:]) for o in outs)
        return restored if isinstance(out, tuple) else restored[0]

    flat.__wrapped__ = call
    return flat

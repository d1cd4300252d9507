"""Chapter 15's figure: bring your own model (the KV cache of one sequence by layer kind, from config.json files)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

import kvmath

from . import figure

#: The repository's Hugging Face config files (tests/data/hf_configs), where the chapter reads them.
HF_CONFIGS = Path(__file__).resolve().parents[4] / "tests" / "data" / "hf_configs"

#: The four models of the figure: (panel label, config file under the config folder).
KIND_MODELS = (
    ("gpt-oss-20b", "openai--gpt-oss-20b/config.json"),
    ("Gemma 3 12B", "google--gemma-3-12b-it/config.json"),
    ("Qwen3-Next 80B", "reconstructed/Qwen--Qwen3-Next-80B-A3B-Instruct.json"),
    ("DeepSeek-V3", "reconstructed/deepseek-ai--DeepSeek-V3.json"),
)


@figure
def kv_by_kind(models: list = KIND_MODELS, config_dir: str | None = None):
    """KV cache of one sequence (bf16) against context, split by layer kind, one panel per model.

    ``models``: (label, config file) pairs, the files under ``config_dir``
    (default: the repository's tests/data/hf_configs). Dashed: all layers.
    """
    import kvbook.plots as kp

    folder = HF_CONFIGS if config_dir is None else Path(config_dir)
    S = np.unique(np.round(2.0 ** np.arange(6, 17.01, 0.125)).astype(int))
    KIND_COLOR = {"full": kp.COLORS[0], "sliding": kp.COLORS[1], "linear": kp.COLORS[2], "mla": kp.COLORS[3]}
    fig, axes = kp.new_figure((9, 6), nrows=2, ncols=2, sharex=True, sharey=True)
    for ax, (label, config) in zip(axes.flat, models):
        with warnings.catch_warnings():   # the hints (multi-token-prediction layers left out) are in the chapter's text
            warnings.simplefilter("ignore", UserWarning)
            m = kvmath.Model.from_hf_config(folder / config)
        parts = m.kv_bytes_by_kind(S)
        for kind in m.layer_kinds:
            n = sum(s.kind == kind for s in m.layer_specs())
            ax.plot(S, np.broadcast_to(parts[kind], S.shape), color=KIND_COLOR[kind], label=f"{kind} ({n} layers)")
        if len(parts) > 1:
            ax.plot(S, m.kv_bytes_per_seq(S), color="0.3", linestyle="--", label="all layers")
        ax.set_yscale("log")
        ax.text(0.03, 0.95, label, transform=ax.transAxes, va="top", fontsize=10, weight="bold")
        ax.legend(loc="lower right", fontsize=8)
    for ax in axes[1]:
        kp.log_context_axis(ax)
        ax.set_xticks(2 ** np.arange(6, 18, 2))
    for ax in axes[:, 0]:
        kp.bytes_axis(ax, "y", "GB", "KV per sequence")
    ax.set_ylim(1e5, 3e10)
    kp.close(fig)  # shown once, as the cell's result
    return fig

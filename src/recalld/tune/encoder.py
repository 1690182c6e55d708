"""The BERT sentence encoder in torch, over the same safetensors weights and names that
`embeddings.onnx_graph` builds its graph from, so tuned weights go back into that builder as is.

It computes what the ONNX graph computes (embeddings, encoder layers, mean pooling over the mask,
L2 normalisation), in fp32, with autograd.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.numpy import load_file, save_file
from tokenizers import Encoding, Tokenizer

from recalld.embeddings.local import MAX_TOKENS
from recalld.embeddings.onnx_graph import BertConfig

_MASK_BIAS = -10000.0
FROZEN = "embeddings.word_embeddings.weight"


class Encoder(torch.nn.Module):
    """A `BertModel` plus mean pooling, its parameters keyed by their safetensors names."""

    def __init__(self, model_dir: Path) -> None:
        super().__init__()
        self.config = BertConfig.from_json(json.loads((model_dir / "config.json").read_text()))
        weights = load_file(str(model_dir / "model.safetensors"))
        # ParameterDict keys may not hold dots. Integer tensors (position_ids) are not trained:
        # they are kept as they are, to be written back with the tuned weights.
        self.weights = torch.nn.ParameterDict(
            {
                k.replace(".", "__"): torch.nn.Parameter(torch.from_numpy(v.astype(np.float32)))
                for k, v in weights.items()
                if np.issubdtype(v.dtype, np.floating)
            }
        )
        self.fixed = {k: v for k, v in weights.items() if not np.issubdtype(v.dtype, np.floating)}
        # The word embedding table is half the model's weights: frozen, each step costs about
        # half (its gradient would be dense), and a few thousand triples cannot retrain a
        # 30k-word vocabulary anyway.
        self._w(FROZEN).requires_grad_(False)
        self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(MAX_TOKENS)

    def freeze_below(self, layers: int) -> None:
        """Freeze the embeddings and the lowest `layers` encoder layers. Autograd records no
        operation whose inputs need no gradient, so a step neither keeps their activations nor
        runs their backward: each frozen layer takes its share of the backward pass off a step
        (the backward costs about twice the forward). The upper layers still adapt."""
        if layers <= 0:
            return
        prefixes = ("embeddings.", *(f"encoder.layer.{i}." for i in range(layers)))
        for key, weight in self.weights.items():
            if key.replace("__", ".").startswith(prefixes):
                weight.requires_grad_(False)

    def _w(self, name: str) -> torch.Tensor:
        weight: torch.Tensor = self.weights[name.replace(".", "__")]
        return weight

    def state_arrays(self) -> dict[str, np.ndarray]:
        """The weights under their safetensors names (float32), and the untrained ones."""
        trained = {
            k.replace("__", "."): v.detach().cpu().numpy().astype(np.float32)
            for k, v in self.weights.items()
        }
        return {**self.fixed, **trained}

    def save_safetensors(self, path: Path) -> None:
        """Write the weights as `model.safetensors` (the format `onnx_graph` builds from)."""
        save_file(self.state_arrays(), str(path))

    def tokenize(self, texts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Token ids and attention mask, padded to the batch's longest text."""
        return self._padded(self.tokenizer.encode_batch(list(texts)))

    @staticmethod
    def _padded(encodings: Sequence[Encoding]) -> tuple[torch.Tensor, torch.Tensor]:
        width = max(len(e.ids) for e in encodings)
        ids = torch.zeros((len(encodings), width), dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, e in enumerate(encodings):
            ids[i, : len(e.ids)] = torch.tensor(e.ids)
            mask[i, : len(e.ids)] = 1
        return ids, mask

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Unit sentence vectors, `[batch, hidden]`."""
        cfg, w = self.config, self._w
        hidden = cfg.hidden_size
        batch, seq = ids.shape
        x = (
            F.embedding(ids, w("embeddings.word_embeddings.weight"))
            + w("embeddings.position_embeddings.weight")[:seq]
            + w("embeddings.token_type_embeddings.weight")[0]
        )
        x = self._norm(x, "embeddings.LayerNorm")
        bias = (1.0 - mask[:, None, None, :].float()) * _MASK_BIAS
        for i in range(cfg.num_layers):
            p = f"encoder.layer.{i}"
            att = f"{p}.attention.self"

            q, k, v = (self._heads(x, f"{att}.{n}") for n in ("query", "key", "value"))
            # softmax(q k^T / sqrt(d) + bias) v, in torch's fused kernel.
            attended = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
            context = attended.transpose(1, 2).reshape(batch, seq, hidden)
            out = f"{p}.attention.output"
            x = self._norm(self._linear(context, f"{out}.dense") + x, f"{out}.LayerNorm")
            h = F.gelu(self._linear(x, f"{p}.intermediate.dense"))
            x = self._norm(self._linear(h, f"{p}.output.dense") + x, f"{p}.output.LayerNorm")
        m = mask.unsqueeze(-1).float()
        pooled = (x * m).sum(1) / m.sum(1).clamp(min=1e-9)
        return F.normalize(pooled, dim=-1)

    def encode(self, texts: Sequence[str], group: int = 0) -> torch.Tensor:
        """Embed texts with gradients (for training).

        With `group`, the texts are encoded `group` at a time in order of length, each group
        padded only to its own longest: a text's vector does not depend on the padding of the
        others (the mask keeps it out), so this only saves the work spent on padding.
        """
        if group <= 0 or len(texts) <= group:
            vectors: torch.Tensor = self(*self.tokenize(texts))
            return vectors
        encodings = self.tokenizer.encode_batch(list(texts))
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        parts = [
            self(*self._padded([encodings[i] for i in order[start : start + group]]))
            for start in range(0, len(order), group)
        ]
        back = torch.empty(len(order), dtype=torch.long)
        back[torch.tensor(order)] = torch.arange(len(order))
        return torch.cat(parts)[back]

    def _heads(self, x: torch.Tensor, name: str) -> torch.Tensor:
        """A projection split into heads, `[batch, heads, seq, head_dim]`."""
        batch, seq, hidden = x.shape
        heads = self.config.num_heads
        y = self._linear(x, name)
        return y.view(batch, seq, heads, hidden // heads).transpose(1, 2)

    def _linear(self, x: torch.Tensor, name: str) -> torch.Tensor:
        return F.linear(x, self._w(f"{name}.weight"), self._w(f"{name}.bias"))

    def _norm(self, x: torch.Tensor, name: str) -> torch.Tensor:
        return F.layer_norm(
            x,
            (self.config.hidden_size,),
            self._w(f"{name}.weight"),
            self._w(f"{name}.bias"),
            self.config.layer_norm_eps,
        )

"""HT: Liu & Lapata (2019)'s Hierarchical Transformer for multi-document summarization."""

import math

import keras
from keras import ops

from keras_hsum.layers.global_transformer_layer import GlobalTransformerLayer
from keras_hsum.layers.hierarchical_position_encoding import (
    HierarchicalPositionEncoding,
)
from keras_hsum.features import GRAPH
from keras_hsum.features import PARAGRAPH_ATTENTION
from keras_hsum.features import PARAGRAPH_MASK
from keras_hsum.features import TOKENS
from keras_hsum.features import TOKEN_MASK
from keras_hsum.layers.input_checks import check_hyperparameters
from keras_hsum.layers.masking import as_bool_mask
from keras_hsum.layers.masking import fold_rows
from keras_hsum.layers.masking import masked_softmax
from keras_hsum.layers.packed_dropout import dropout_layer
from keras_hsum.layers.token_shift import TokenShift
from keras_hsum.layers.transformer_encoder import TransformerEncoder
from keras_hsum.models.copying import make_copy_layers
from keras_hsum.models.flat_memory_summarizer import FlatMemorySummarizer
from keras_hsum.models.summarizer import required
from keras_hsum.models.transformer_summary_decoder import cached_decoder_layer

LOCAL = "L"
GLOBAL = "G"


@keras.saving.register_keras_serializable(package="keras_hsum")
class HierarchicalTransformer(FlatMemorySummarizer):
    """The Hierarchical Transformer (HT) encoder-decoder.

    The P ranked paragraphs of T tokens are embedded with
    `HierarchicalPositionEncoding` (token embedding·√D + [sinusoid(paragraph
    rank); sinusoid(token position)], the rank being the paragraph index
    since paragraphs arrive ranked), then encoded by a stack of layers given
    by `layer_schedule`, a string over {"L", "G"} read bottom to top:

    - "L", a local layer: a keras-hub `TransformerEncoder` inside every
      paragraph ([B·P,T,D], token_mask as padding mask);
    - "G", a global layer: `GlobalTransformerLayer` (multi-head pooling →
      inter-paragraph attention → context added to every token → FFN); the
      heads listed in `graph_heads` follow the input `graph` when one is
      given (graph-informed attention, HT §3.4).

    HT's released configuration is "LLLLLLGG" (6 local then 2 global layers).
    The decoder (`TransformerSummaryDecoder`) attends over the flattened
    memory [B,P·T,D] with mask token_mask ∧ paragraph_mask. Source, target
    and output embeddings are one matrix: the position encoding's token
    embedding *is* the decoder's public `token_embedding` (the same
    `ReversibleEmbedding` object, assigned before either is built, so its
    weights are created once, trained once and saved once).

    Args:
        vocabulary_size: V.
        hidden_dim: D (even; divisible by num_heads).
        num_heads: H of every attention (local, global, decoder).
        intermediate_dim: FFN width.
        layer_schedule: encoder layers bottom to top, e.g. "LLLLLLGG".
        num_decoder_layers: decoder depth.
        graph_heads: optional list of global-attention head indices that
            follow the input `graph` (when one is given).
        dropout: dropout rate.
        attention_dropout: dropout rate on the attention probabilities, or
            None (the default, the papers' setting) for `dropout`; 0 lets
            keras-hub's attention layers run through `keras.ops.dot_product_attention`
            (fused cuDNN attention on a GPU).
        tie_embeddings: tie the output projection to the embedding.
        pointer_generator: add the copy mechanism over the P·T memory
            tokens (not in the paper; `keras_hsum.models.copying`; default
            False).
        token_shift: add to each token's input vector (embedding·√D +
            position encoding) a learned projection of its predecessor's in
            the same paragraph (`keras_hsum.layers.TokenShift`; not in the
            paper; default False), so that copying can follow a span.
        pad_id, bos_id, eos_id: special ids.

    Inputs (dict):
        tokens: int [B,P,T] ranked paragraphs ("paragraphs" family).
        token_mask: optional bool [B,P,T]; default tokens != pad.
        paragraph_mask: optional bool [B,P]; default any(token_mask, -1).
        graph: optional float [B,P,P] (pipeline extra
            `paragraph_graph(kind)`; only read when `graph_heads` is set).
        decoder_tokens: int [B,S] (teacher forcing).

    Returns (call):
        float32 logits [B,S,V] (log-probabilities with `pointer_generator`).

    Decoding aux: `{"paragraph_attention": float32 [B,P]}`, the last
    decoder layer's cross-attention probabilities, averaged over heads and
    summed over each paragraph's tokens (rows sum to 1 over real
    paragraphs; 0 on padded ones).

    References:
        Liu & Lapata (2019), Hierarchical Transformers for Multi-Document
        Summarization, ACL (§3.1-3.4).
    """

    def __init__(
        self,
        vocabulary_size,
        hidden_dim=256,
        num_heads=8,
        intermediate_dim=1024,
        layer_schedule="LLLLLLGG",
        num_decoder_layers=6,
        graph_heads=None,
        dropout=0.1,
        tie_embeddings=True,
        pointer_generator=False,
        token_shift=False,
        attention_dropout=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_hyperparameters(
            self.name, vocabulary_size=vocabulary_size, hidden_dim=hidden_dim, num_heads=num_heads,
            intermediate_dim=intermediate_dim, num_decoder_layers=num_decoder_layers,
            dropout=dropout, attention_dropout=attention_dropout,
            optional=("attention_dropout",),
        )
        if not isinstance(layer_schedule, str) or not layer_schedule or set(
            layer_schedule
        ) - {LOCAL, GLOBAL}:
            raise ValueError(
                f"{self.name}: `layer_schedule` must be a non-empty string of "
                f"'L' (local) and 'G' (global) layers, e.g. 'LLLLLLGG'; "
                f"received {layer_schedule!r}."
            )
        if hidden_dim % 2 or hidden_dim % num_heads:
            raise ValueError(
                f"{self.name}: `hidden_dim` must be even and divisible by "
                f"`num_heads`; received hidden_dim={hidden_dim}, "
                f"num_heads={num_heads}."
            )
        if graph_heads is not None:
            graph_heads = [int(h) for h in graph_heads]
            if GLOBAL not in layer_schedule and graph_heads:
                raise ValueError(
                    f"{self.name}: `graph_heads`={graph_heads} needs at least one "
                    f"global layer 'G' in `layer_schedule`, received "
                    f"{layer_schedule!r}."
                )
        self.layer_schedule = layer_schedule
        self.graph_heads = graph_heads
        self.pointer_generator = bool(pointer_generator)
        self.token_shift = bool(token_shift)
        self._init_decoder(
            vocabulary_size,
            hidden_dim,
            num_heads,
            intermediate_dim,
            num_decoder_layers,
            dropout,
            tie_embeddings,
            attention_dropout=attention_dropout,
        )
        self.position_encoding = HierarchicalPositionEncoding(
            vocabulary_size=vocabulary_size,
            hidden_dim=hidden_dim,
            scale_embeddings=True,
            # Tie source and target embeddings: one ReversibleEmbedding
            # object (Embedding.build returns early once built, so it is
            # built once), and no second, never-built one to track.
            token_embedding=self.decoder.token_embedding,
            dtype=self.dtype_policy,
            name="position_encoding",
        )
        self.source_token_shift = (
            TokenShift(dtype=self.dtype_policy, name="source_token_shift")
            if self.token_shift
            else None
        )
        self.source_dropout = dropout_layer(
            dropout, dtype=self.dtype_policy, name="source_dropout"
        )
        if self.pointer_generator:
            self.copy_attention, self.copy_switch = make_copy_layers(
                self, vocabulary_size
            )
        self.encoder_layers = []
        for i, kind in enumerate(layer_schedule):
            if kind == LOCAL:
                layer = TransformerEncoder(
                    intermediate_dim=intermediate_dim,
                    num_heads=num_heads,
                    dropout=dropout,
                    attention_dropout=attention_dropout,
                    layer_norm_epsilon=1e-5,
                    dtype=self.dtype_policy,
                    name=f"local_layer_{i}",
                )
            else:
                layer = GlobalTransformerLayer(
                    num_heads=num_heads,
                    intermediate_dim=intermediate_dim,
                    graph_heads=graph_heads,
                    dropout=dropout,
                    attention_dropout=attention_dropout,
                    layer_norm_epsilon=1e-5,
                    dtype=self.dtype_policy,
                    name=f"global_layer_{i}",
                )
            self.encoder_layers.append(layer)

    def _masks(self, inputs, tokens):
        if len(tokens.shape) != 3:
            raise ValueError(
                f"{self.name}: `tokens` must be int [B,P,T] (the 'paragraphs' "
                f"family), received shape {tuple(tokens.shape)}. Build batches "
                "with recipes.ht.make_dataset."
            )
        if TOKEN_MASK in inputs and inputs[TOKEN_MASK] is not None:
            token_mask = as_bool_mask(inputs[TOKEN_MASK])
        else:
            token_mask = ops.not_equal(tokens, self.pad_id)
        if PARAGRAPH_MASK in inputs and inputs[PARAGRAPH_MASK] is not None:
            paragraph_mask = as_bool_mask(inputs[PARAGRAPH_MASK])
        else:
            paragraph_mask = ops.any(token_mask, axis=-1)
        token_mask = ops.logical_and(token_mask, paragraph_mask[:, :, None])
        return token_mask, paragraph_mask

    def encode(self, inputs, training=False):
        """Returns `{"memory": [B,P·T,D], "memory_mask": bool [B,P·T],
        "paragraph_mask": bool [B,P]}` (and `"source_ids"` int [B,P·T] with
        `pointer_generator`)."""
        tokens = required(self, inputs, TOKENS, "int [B,P,T]")
        tokens = ops.convert_to_tensor(tokens)
        token_mask, paragraph_mask = self._masks(inputs, tokens)
        graph = inputs.get(GRAPH) if self.graph_heads else None
        if graph is not None:
            graph = ops.convert_to_tensor(graph)
            if len(graph.shape) != 3:
                raise ValueError(
                    f"{self.name}: `graph` must be float [B,P,P], received shape "
                    f"{tuple(graph.shape)}. Use the pipeline extra "
                    "keras_hsum.data.pipeline.paragraph_graph(kind)."
                )
        shape = ops.shape(tokens)
        batch, paragraphs, length = shape[0], shape[1], shape[2]
        x = self.position_encoding(tokens)
        if self.source_token_shift is not None:
            x = self.source_token_shift(x, token_mask=token_mask)
        x = self.source_dropout(x, training=training)
        flat_mask = ops.reshape(token_mask, (batch * paragraphs, length))
        for layer in self.encoder_layers:
            if isinstance(layer, GlobalTransformerLayer):
                x = layer(
                    x,
                    token_mask=token_mask,
                    paragraph_mask=paragraph_mask,
                    graph=graph,
                    training=training,
                )
            else:
                flat = ops.reshape(x, (batch * paragraphs, length, self.hidden_dim))
                flat = layer(flat, padding_mask=flat_mask, training=training)
                x = ops.reshape(flat, (batch, paragraphs, length, self.hidden_dim))
        memory = {
            "memory": ops.reshape(x, (batch, paragraphs * length, self.hidden_dim)),
            "memory_mask": ops.reshape(token_mask, (batch, paragraphs * length)),
            PARAGRAPH_MASK: paragraph_mask,
        }
        if self.pointer_generator:
            memory["source_ids"] = ops.reshape(
                ops.cast(tokens, "int32"), (batch, paragraphs * length)
            )
        return memory

    def _paragraph_attention(self, layer, query_input, keys, memory_mask, paragraph_mask):
        """float32 [N,P]: head-averaged cross-attention probabilities of one
        query position, summed over each paragraph's T tokens. `query_input`
        [N,1,D] (N = B·K rows, row b·K + k reading example b), `keys`
        [B,M,H,Dh], masks [B,M] and [B,P]."""
        query = layer._cross_attention_layer._query_dense(query_input)  # [N,1,H,Dh]
        query, rows = fold_rows(query, keys)  # [B,K,H,Dh]
        scores = ops.einsum(
            "bshk,bmhk->bhsm", ops.cast(query, "float32"), ops.cast(keys, "float32")
        ) / math.sqrt(self.hidden_dim // self.num_heads)
        probabilities = masked_softmax(scores, memory_mask[:, None, None, :], axis=-1)
        per_token = ops.mean(probabilities, axis=1)  # [B,K,M]
        paragraphs = ops.shape(paragraph_mask)[1]
        return ops.sum(ops.reshape(per_token, (rows, paragraphs, -1)), axis=-1)

    def step(self, ids, index, cache):
        """One position: `ids` int [N] at `index` → logits float32 [N,V'].

        N = B with `initial_cache`'s cache; N = B·K with `beam_cache`'s
        (row b·K + k reads example b of the memory). aux
        `"paragraph_attention"` float32 [N,P]: the last decoder layer's
        head-averaged cross-attention summed over each paragraph's tokens.
        """
        static, state = cache
        memory_mask = static["memory_mask"]
        x = self.decoder.embed(ops.expand_dims(ids, 1), start_index=index)
        decoder_inputs = x
        updated = []
        for i, layer in enumerate(self.decoder.decoder_layers):
            cross_cache = static["cross_caches"][i]  # (key, value) [B,M,H,Dh]
            x, self_cache, query_input = cached_decoder_layer(
                layer, x, index, state["self_caches"][:, i], cross_cache, memory_mask
            )
            updated.append(self_cache)
        paragraph_attention = self._paragraph_attention(
            layer, query_input, cross_cache[0], memory_mask, static[PARAGRAPH_MASK]
        )
        logits = self._outputs(x, decoder_inputs, static)[:, 0]
        aux = {PARAGRAPH_ATTENTION: paragraph_attention}
        return logits, (static, {"self_caches": ops.stack(updated, axis=1)}), aux

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "hidden_dim": self.hidden_dim,
                "num_heads": self.num_heads,
                "intermediate_dim": self.intermediate_dim,
                "layer_schedule": self.layer_schedule,
                "num_decoder_layers": self.num_decoder_layers,
                "graph_heads": self.graph_heads,
                "dropout": self.dropout,
                "tie_embeddings": self.tie_embeddings,
                "pointer_generator": self.pointer_generator,
                "token_shift": self.token_shift,
                "attention_dropout": self.attention_dropout,
            }
        )
        return config

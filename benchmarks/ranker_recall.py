"""Learned paragraph ranker vs tf-idf vs reading order: ROUGE-2 recall of top-k.

Trains the tiny `recipes.ranker` ParagraphRanker for a few CPU minutes on
qmsum_goldspan train, then on the validation split chooses the top-k
paragraphs of every example three ways (learned scores, tf-idf cosine to
the query, reading order) and measures the ROUGE-2 recall of the reference
summary's bigrams covered by the k chosen paragraphs together (rouge-score
tokenizer with stemming, via keras_hsum.data.rouge_overlap). Every method
chooses from the same pool: the example's first `--pool` paragraphs in
reading order (re-chunked to T tokens).

Usage: python benchmarks/ranker_recall.py [--train-seconds 240] [--k 5 10]
Writes benchmarks/results/ranker_recall.json and .md.
"""

import argparse
import json
import os
import platform
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_hsum.data import corpus_path  # noqa: E402
from keras_hsum.data import read_examples  # noqa: E402
from keras_hsum.data.ranking import tfidf_cosine  # noqa: E402
from keras_hsum.data.rouge_overlap import RougeReference  # noqa: E402
from keras_hsum.data.reader import render_documents  # noqa: E402
from keras_hsum.data.structure import context_text  # noqa: E402
from keras_hsum.data.structurer import TextStructurer  # noqa: E402
from keras_hsum.data.vocabulary import Vocabulary  # noqa: E402
from keras_hsum.data.vocabulary import corpus_sentences  # noqa: E402
from keras_hsum.recipes import ranker as recipe  # noqa: E402
from keras_hsum.training.model_setup import make_optimizer  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


class TimeBudget(keras.callbacks.Callback):
    def __init__(self, seconds):
        super().__init__()
        self.seconds = seconds
        self.start = time.time()

    def on_train_batch_end(self, batch, logs=None):
        if time.time() - self.start > self.seconds:
            self.model.stop_training = True


def train_ranker(config, vocabulary, train_seconds):
    train = recipe.make_dataset(config, corpus_path(config.dataset, "train"), vocabulary,
                                training=True, cache=True)
    model = recipe.build_model(config, vocabulary.vocabulary_size)
    model.compile(optimizer=make_optimizer(config), loss=recipe.loss(config),
                  metrics=recipe.metrics(config))
    budget = TimeBudget(train_seconds)
    history = model.fit(train, epochs=1000, steps_per_epoch=config.steps_per_epoch,
                        callbacks=[budget], verbose=2, shuffle=False)  # shuffled by the pipeline
    steps = int(model.optimizer.iterations.numpy())
    return model, steps, history.history["loss"][-1], time.time() - budget.start


def recall_of(reference, texts, order, k):
    chosen = " ".join(texts[i] for i in order[:k])
    return reference.score(chosen, n=2).recall


def evaluate(model, config, vocabulary, pool, ks, max_examples):
    examples = list(read_examples(corpus_path(config.dataset, "val")))[:max_examples]
    figures = {m: {k: [] for k in ks} for m in ("learned", "tfidf", "order", "oracle")}
    rows = []
    structurer = TextStructurer(vocabulary.proto, "paragraphs", pool, config.paragraph_length,
                                rank="order", context_length=config.context_length)
    for example in examples:
        if not example.summary:
            continue
        out = structurer(tf.constant([render_documents(example) or [""]]),
                         title=tf.constant([example.title or ""]),
                         query=tf.constant([example.query or ""]))
        rows = int(np.sum(out["paragraph_mask"][0]))
        if not rows:
            continue
        texts = [t.decode("utf-8") for t in out["unit_texts"][0].numpy()[:rows]]
        features = {name: out[name][0].numpy() for name in
                    ("tokens", "token_mask", "paragraph_mask")}
        features = {name: value[:rows] for name, value in features.items()}
        context = out["context_tokens"][0].numpy()
        context = context[context != vocabulary.pad_id]
        if len(context) == 0:
            context = np.zeros((1,), "int32")
        inputs = {
            "tokens": features["tokens"][None],
            "token_mask": features["token_mask"][None],
            "paragraph_mask": features["paragraph_mask"][None],
            "context_tokens": np.asarray(context, "int32")[None],
        }
        learned = np.asarray(model(inputs, training=False))[0]
        tfidf = tfidf_cosine(context_text(example), texts)
        reference = RougeReference(example.summary)
        single = np.array([reference.score(t, n=2).recall for t in texts])
        orders = {
            "learned": np.argsort(-learned, kind="stable"),
            "tfidf": np.argsort(-tfidf, kind="stable"),
            "order": np.arange(len(texts)),
            "oracle": np.argsort(-single, kind="stable"),
        }
        for method, order in orders.items():
            for k in ks:
                figures[method][k].append(recall_of(reference, texts, order, k))
        rows.append(len(texts))
    return figures, rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default="tiny")
    parser.add_argument("--train-seconds", type=float, default=240)
    parser.add_argument("--pool", type=int, default=64)
    parser.add_argument("--k", type=int, nargs="+", default=[5, 10])
    parser.add_argument("--max-val-examples", type=int, default=200)
    args = parser.parse_args()
    keras.utils.set_random_seed(0)
    config = recipe.CONFIGS[args.config]
    start = time.time()
    train_examples = list(read_examples(corpus_path(config.dataset, "train")))
    vocabulary = Vocabulary.train(corpus_sentences(train_examples),
                                  vocabulary_size=config.vocabulary_size)
    print(f"vocabulary: {time.time() - start:.0f}s", flush=True)
    model, steps, loss, seconds = train_ranker(config, vocabulary, args.train_seconds)
    print(f"trained {steps} steps in {seconds:.0f}s, final loss {loss:.4f}", flush=True)
    figures, rows = evaluate(model, config, vocabulary, args.pool, args.k,
                             args.max_val_examples)
    summary = {
        method: {str(k): float(np.mean(v)) for k, v in by_k.items()}
        for method, by_k in figures.items()
    }
    result = {
        "dataset": config.dataset,
        "config": args.config,
        "train_steps": steps,
        "train_seconds": round(seconds, 1),
        "final_train_loss": loss,
        "validation_examples": len(rows),
        "pool": args.pool,
        "mean_pool_paragraphs": float(np.mean(rows)),
        "paragraph_length": config.paragraph_length,
        "rouge2_recall_top_k": summary,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, TensorFlow {tf.__version__}",
    }
    print(json.dumps(result, indent=2))
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "ranker_recall.json"), "w") as f:
        json.dump(result, f, indent=2)
    lines = [
        "# Paragraph ranking: ROUGE-2 recall of the top-k paragraphs",
        "",
        f"{config.dataset} validation, {len(rows)} examples; pool = first {args.pool} "
        f"paragraphs of <= {config.paragraph_length} tokens in reading order "
        f"(mean {np.mean(rows):.1f}); learned = tiny ParagraphRanker trained "
        f"{steps} steps ({seconds:.0f}s CPU wall). Oracle = top-k by each "
        "paragraph's own ROUGE-2 recall (the ranker's training target).",
        "",
        "| method | " + " | ".join(f"top-{k}" for k in args.k) + " |",
        "|---|" + "---|" * len(args.k),
    ]
    for method in ("learned", "tfidf", "order", "oracle"):
        lines.append(f"| {method} | " + " | ".join(
            f"{summary[method][str(k)]:.4f}" for k in args.k) + " |")
    with open(os.path.join(RESULTS, "ranker_recall.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

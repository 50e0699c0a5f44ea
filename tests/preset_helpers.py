"""Small keras-hub presets made from bundled real text, for the tests of
preset tokenizers (`PresetVocabulary`) and backbone runs.

`save_presets(root, real_examples)` writes a BART and a T5 preset folder:
each a tiny random backbone (`Backbone.save_to_preset`: its `config.json` is
what `Tokenizer.from_preset` reads to pick the class) and a tokenizer
learned here (`Tokenizer.save_to_preset`): T5's SentencePiece model
trained with `sentencepiece` (pad 0, EOS 1, unk 2, as T5's), BART's
byte-level BPE vocabulary and merges learned by `learn_bpe`.
"""

import collections

import regex

# GPT-2's pre-tokenizer (words with their leading space, numbers,
# punctuation runs, spaces), which BART's BPE merges within.
GPT2_WORDS = regex.compile(
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
)


def learn_bpe(texts, num_merges):
    """A byte-level BPE vocabulary and merges (Sennrich et al. 2016 on the
    byte-to-unicode alphabet of GPT-2): repeatedly merge the most frequent
    adjacent pair of symbols within the words of `texts`.

    Returns:
        `(vocabulary dict piece -> id, merges list of "a b")`, with BART's
        special tokens `<s>` 0, `<pad>` 1, `</s>` 2, `<unk>` 3 first and
        `<mask>` last.
    """
    from keras_hub.src.tokenizers.byte_pair_tokenizer import bytes_to_unicode

    byte_values, characters = bytes_to_unicode()
    alphabet = {b[0]: c for b, c in zip(byte_values, characters)}
    words = collections.Counter(
        tuple(alphabet[b] for b in word.encode("utf-8"))
        for text in texts for word in GPT2_WORDS.findall(text)
    )
    merges = []
    for _ in range(num_merges):
        pairs = collections.Counter()
        for word, count in words.items():
            for pair in zip(word, word[1:]):
                pairs[pair] += count
        if not pairs:
            break
        best = max(pairs, key=lambda pair: (pairs[pair], pair))
        merges.append(best)
        merged = collections.Counter()
        for word, count in words.items():
            symbols, i = [], 0
            while i < len(word):
                if word[i:i + 2] == best:
                    symbols.append(best[0] + best[1])
                    i += 2
                else:
                    symbols.append(word[i])
                    i += 1
            merged[tuple(symbols)] += count
        words = merged
    vocabulary = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for piece in list(characters) + [a + b for a, b in merges]:
        vocabulary.setdefault(piece, len(vocabulary))
    vocabulary["<mask>"] = len(vocabulary)
    return vocabulary, [f"{a} {b}" for a, b in merges]


def training_text(real_examples):
    """Sentences of bundled training examples (the tokenizers learn these)."""
    return [
        sentence
        for example in real_examples("scisummnet", "train")[:3]
        + real_examples("qmsum_general", "train")[:2]
        for document in example.documents
        for section in document.sections
        for paragraph in section.paragraphs
        for sentence in paragraph
    ] + [e.summary for e in real_examples("scisummnet", "train")[:3]]


def t5_proto(sentences):
    """A SentencePiece model with T5's reserved ids (pad 0, EOS 1, unk 2)."""
    import io

    import sentencepiece

    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences),
        model_writer=model,
        model_type="unigram",
        vocab_size=600,
        pad_id=0,
        eos_id=1,
        unk_id=2,
        bos_id=-1,
        character_coverage=1.0,
        hard_vocab_limit=False,
        num_threads=1,
        minloglevel=2,
    )
    return model.getvalue()


def save_presets(root, real_examples, kinds=("bart", "t5")):
    """Writes `root/bart` and `root/t5`; returns `{kind: folder}`."""
    import keras_hub

    texts = training_text(real_examples)
    tokenizers, backbones = {}, {}
    if "bart" in kinds:
        vocabulary, merges = learn_bpe(texts, 200)
        tokenizers["bart"] = keras_hub.tokenizers.BartTokenizer(
            vocabulary=vocabulary, merges=merges
        )
        backbones["bart"] = keras_hub.models.BartBackbone(
            vocabulary_size=tokenizers["bart"].vocabulary_size(), num_layers=1,
            num_heads=1, hidden_dim=4, intermediate_dim=8, max_sequence_length=8,
        )
    if "t5" in kinds:
        tokenizers["t5"] = keras_hub.models.T5Tokenizer(proto=t5_proto(texts))
        backbones["t5"] = keras_hub.models.T5Backbone(
            vocabulary_size=tokenizers["t5"].vocabulary_size(), num_layers=1,
            num_heads=1, hidden_dim=4, intermediate_dim=8,
        )
    folders = {}
    for kind, tokenizer in tokenizers.items():
        folder = str(root / kind)
        backbones[kind].save_to_preset(folder)
        tokenizer.save_to_preset(folder)
        folders[kind] = folder
    return folders

"""Every run of the quality record, as data: what it trains, how it is
decoded and how it came to be a row.

A `Run` states the recipe and dataset, the config overrides on the recipe's
`tiny` config, the CPU budget in minutes, the checkpoint and decoding it is
exported with, and `chosen_by`: how the run came about and what it decides.
`RUNS` lists them in the order they were declared; docs/results.md tells
each one's story ("The run journal") and the package `quality_record` reads
them (`python benchmarks/quality.py train RUN`, ...). Nothing here imports
keras_hsum.
"""

import dataclasses
from typing import Any, Mapping, Optional, Tuple

# How a run came about (`Run.chosen_by`).
EARLY = ("specified as the record went, after earlier rows were scored; not declared before "
         "training")
DECLARED = "declared before training; scored as declared, chooses nothing among rows"
ROW_OF_RECORD = ("declared before training as its protocol's row of record, its checkpoint "
                 "picked on held-out training examples")
CANDIDATE = ("declared before training, with the rule that picks the row of record on "
             "held-out training examples (`choose_row`, see choices.ROW_GROUPS)")
EXTRA = "declared before training as an extra row beside the row of record; decides nothing"
DIAGNOSIS = "declared before training as a diagnosis; decides nothing"
STAGE = "not a row: a training stage that later runs start from (or decode with)"


@dataclasses.dataclass(frozen=True)
class Run:
    """One run of the quality record.

    Args:
        name: the run's folder under runs/results/ and its report's name.
        recipe: the `keras-hsum train --recipe` it trains.
        dataset: the dataset of ../shared/data it is scored on (for a
            training stage, the folder it trains on).
        chosen_by: how it came about and what it decides (EARLY, DECLARED,
            ROW_OF_RECORD, CANDIDATE, EXTRA, DIAGNOSIS or STAGE).
        minutes: the training budget (`--max-minutes`); None for a run that
            only exports another (`base`).
        overrides: `--set` values on the recipe's tiny config.
        base: the trained run this one exports, if not itself.
        checkpoint: "best", "last", or "chosen_epoch" / "chosen_average" /
            "chosen_ensemble" (picked among kept epochs on a hold-out); None:
            its base's, else "last".
        data: a folder under runs/data/ that `prepare` writes (see
            quality_record.prepare), instead of ../shared/data/<dataset>.
        init_from, init_checkpoint: the run (and its checkpoint) whose weights
            start the training.
        pretraining: how a training stage is named in the recipes of the
            rows fine-tuned from it.
        label: words added to the row's recipe in the tables.
        holdout_of: (dataset, fraction) of the held-out training examples,
            for a run whose data folder was built around that hold-out.
        min_length_factor, beam_size, mbr, sampling, block_recent,
            recent_exceptions, predictor: decoding settings of its export
            (None: the defaults in quality_record.steps).
        evaluate: False for a run that is not scored (a training stage).
        epoch_choice_part, average_last, average_choice_part, ensemble_last,
            ensemble_best, ensemble_choice_part: the candidates and hold-out
            half of the checkpoint choices among kept epochs.
        served_without_sections: evaluated before stop 40, when sectioned
            documents were served as one section each.
        stop: the journal's stop at which it was declared, where recorded.
    """

    name: str
    recipe: str
    dataset: str
    chosen_by: str
    minutes: Optional[float] = None
    base: Optional[str] = None
    checkpoint: Optional[str] = None
    data: Optional[str] = None
    init_from: Optional[str] = None
    init_checkpoint: Optional[str] = None
    pretraining: Optional[str] = None
    label: Optional[str] = None
    holdout_of: Optional[Tuple[str, float]] = None
    min_length_factor: Optional[float] = None
    beam_size: Optional[int] = None
    mbr: bool = False
    sampling: Optional[Mapping[str, Any]] = None
    block_recent: Optional[int] = None
    recent_exceptions: Tuple[str, ...] = ()
    predictor: Optional[str] = None
    evaluate: bool = True
    epoch_choice_part: Optional[str] = None
    average_last: Optional[Tuple[int, ...]] = None
    average_choice_part: Optional[str] = None
    ensemble_last: Optional[Tuple[int, ...]] = None
    ensemble_best: Optional[int] = None
    ensemble_choice_part: Optional[str] = None
    served_without_sections: bool = False
    stop: Optional[int] = None
    overrides: Mapping[str, Any] = dataclasses.field(default_factory=dict)


# A mid-sized model for a CPU budget: the tiny configs widened to D=128.
PARAGRAPH_MODEL = {
    "vocabulary_size": 8000, "hidden_dim": 128, "intermediate_dim": 512, "dropout": 0.2,
    "warmup_steps": 400, "epochs": 200, "steps_per_epoch": 100,
}
# Cohan et al.'s schedule cut to five epochs (coverage in the last two),
# with the widths the 2-core budget allows; runs vary the section length.
DISCOURSE = {
    "vocabulary_size": 8000, "hidden_dim": 128, "embedding_dim": 64,
    "max_sections": 4, "max_section_length": 150, "max_target_length": 128,
    "warmup_steps": 200, "epochs": 5, "steps_per_epoch": 75, "coverage_start_epoch": 3,
}
# PHT on the gold spans: 16 paragraphs of 64 tokens.
GOLDSPAN_PHT = {**PARAGRAPH_MODEL, "num_encoder_layers": 2, "num_decoder_layers": 2,
                "max_paragraphs": 16, "max_paragraph_tokens": 64, "max_target_length": 128}
# HT + copy on the gold spans: 16 paragraphs of 64 tokens, LLGG.
HT = {**PARAGRAPH_MODEL, "layer_schedule": "LLGG", "num_decoder_layers": 2,
      "max_paragraphs": 16, "max_test_paragraphs": 16,
      "paragraph_length": 64, "max_target_length": 128}
HT_COPY = {**HT, "pointer_generator": True}
# The flat transformer on the gold spans: 1,024 source tokens.
GOLDSPAN_FLAT = {**PARAGRAPH_MODEL, "num_encoder_layers": 2, "num_decoder_layers": 2,
                 "max_source_length": 1024, "max_target_length": 128}
# The SEAL family on qmsum_general: 32 snippets, 129 target tokens.
QMSUM_GENERAL = {**PARAGRAPH_MODEL, "max_snippets": 32, "max_target_length": 129,
                 "steps_per_epoch": 50}
# PHT on the few-shot review sets: 8 reviews as rows in reading order.
FEWSUM_PHT = {
    **PARAGRAPH_MODEL, "num_encoder_layers": 2, "num_decoder_layers": 2,
    "max_paragraphs": 8, "max_paragraph_tokens": 64, "max_target_length": 96,
    "rank": "order", "pack": "paragraph", "steps_per_epoch": 25,
}
FEWSUM_PHT_ALL = {**FEWSUM_PHT, "train_references": "all", "vocabulary_size": 2000,
                  "dropout": 0.3}
FEWSUM_PHT_LOO = {**FEWSUM_PHT_ALL, "train_references": "leave_one_out"}
FEWSUM_TUNED = {**FEWSUM_PHT_ALL, "pointer_generator": True}
FEWSUM_LOO_COPY = {**FEWSUM_PHT_LOO, "pointer_generator": True}
# Both FewSum sets' references, the 4 held-out amazon products last.
FEWSUM_BOTHSETS = {**FEWSUM_TUNED, "validation_holdout": 4 / 58}
# PHT + copy on the sectioned papers: rows of 64 tokens in reading order.
SCISUMMNET_PHT_COPY = {**GOLDSPAN_PHT, "max_target_length": 160, "rank": "order",
                       "pack": "paragraph", "steps_per_epoch": 75, "pointer_generator": True}
# The flat transformer + copy for abstract -> TLDR, 10% of the training
# papers held out to pick the checkpoint; then with the token shift, the
# checkpoint-picking loss on all 199 held-out papers and token accuracy as
# the monitor; then REINFORCE fine-tuning.
SCITLDR_FLAT_COPY = {**PARAGRAPH_MODEL, "num_encoder_layers": 2, "num_decoder_layers": 2,
                     "max_source_length": 400, "max_target_length": 64,
                     "pointer_generator": True, "validation_holdout": 0.1}
SCITLDR_FLAT_SHIFT = {**SCITLDR_FLAT_COPY, "token_shift": True}
SCITLDR_FLAT_ACC = {**SCITLDR_FLAT_SHIFT, "max_val_examples": None, "validation_steps": None,
                    "checkpoint_monitor": "val_accuracy"}
SCITLDR_REINFORCE = {**SCITLDR_FLAT_ACC, "reinforce_weight": 0.99, "reinforce_samples": 4,
                     "warmup_steps": 4200, "checkpoint_monitor": "val_reward"}
FEWSUM_REINFORCE = {**FEWSUM_BOTHSETS, "reinforce_weight": 0.99, "reinforce_samples": 4,
                    "checkpoint_monitor": "val_reward"}

RUNS = (
    Run("pht_goldspan", "pht", "qmsum_goldspan", EARLY, minutes=50, checkpoint="best",
        served_without_sections=True, overrides=GOLDSPAN_PHT),
    Run("pht_last_goldspan", "pht", "qmsum_goldspan", EARLY, base="pht_goldspan",
        checkpoint="last", served_without_sections=True),
    Run("pht_copy_goldspan", "pht", "qmsum_goldspan", EARLY, minutes=42,
        served_without_sections=True, overrides={**GOLDSPAN_PHT, "pointer_generator": True}),
    Run("pht_predictor_goldspan", "pht_predictor", "qmsum_goldspan", STAGE, minutes=6,
        evaluate=False,
        overrides={"teacher_run": "runs/results/pht_goldspan", "teacher_checkpoint": "best",
                   "vocabulary_size": 8000, "hidden_dim": 128, "intermediate_dim": 512,
                   "max_paragraphs": 16, "max_paragraph_tokens": 64, "max_target_length": 128,
                   "epochs": 200, "steps_per_epoch": 50}),
    Run("pht_aligned_goldspan", "pht", "qmsum_goldspan", EARLY, base="pht_goldspan",
        predictor="pht_predictor_goldspan", served_without_sections=True),
    Run("ht_goldspan", "ht", "qmsum_goldspan", EARLY, minutes=50, checkpoint="best", overrides=HT),
    Run("ht_copy_goldspan", "ht", "qmsum_goldspan", EARLY, minutes=20, overrides=HT_COPY),
    Run("ht_copy_long_goldspan", "ht", "qmsum_goldspan", EARLY, minutes=60, overrides=HT_COPY),
    Run("flat_copy_goldspan", "flat", "qmsum_goldspan", EARLY, minutes=20,
        overrides={**GOLDSPAN_FLAT, "pointer_generator": True}),
    Run("flat_goldspan", "flat", "qmsum_goldspan", EARLY, minutes=20, overrides=GOLDSPAN_FLAT),
    Run("discourse_scisummnet", "discourse", "scisummnet", EARLY, minutes=60, checkpoint="best",
        served_without_sections=True,
        overrides={**DISCOURSE, "epochs": 16, "coverage_start_epoch": 13}),
    Run("discourse_short_scisummnet", "discourse", "scisummnet", EARLY, minutes=40,
        served_without_sections=True, overrides=DISCOURSE),
    Run("discourse_long_scisummnet", "discourse", "scisummnet", EARLY, minutes=45,
        served_without_sections=True, overrides={**DISCOURSE, "max_section_length": 250}),
    Run("discourse_500_scisummnet", "discourse", "scisummnet", EARLY, minutes=40,
        served_without_sections=True, overrides={**DISCOURSE, "max_section_length": 500}),
    Run("discourse_500_long_scisummnet", "discourse", "scisummnet", EARLY, minutes=60,
        served_without_sections=True,
        overrides={**DISCOURSE, "max_section_length": 500, "epochs": 9, "coverage_start_epoch": 7}),
    Run("discourse_500_sections_scisummnet", "discourse", "scisummnet", DECLARED, minutes=40,
        stop=40, overrides={**DISCOURSE, "max_section_length": 500}),
    Run("pht_copy_scisummnet", "pht", "scisummnet", EARLY, minutes=55, checkpoint="best",
        served_without_sections=True, overrides=SCISUMMNET_PHT_COPY),
    Run("pht_copy_last_scisummnet", "pht", "scisummnet", EARLY, base="pht_copy_scisummnet",
        checkpoint="last", served_without_sections=True),
    Run("seal_general", "seal", "qmsum_general", EARLY, minutes=15,
        overrides={**PARAGRAPH_MODEL, "max_snippets": 32, "extract_length": 256,
                   "max_target_length": 129, "segment_length": 32, "steps_per_epoch": 50}),
    Run("extractive_abstractive_general", "extractive_abstractive", "qmsum_general", EARLY,
        minutes=15,
        overrides={**PARAGRAPH_MODEL, "max_snippets": 32, "extract_length": 256,
                   "max_target_length": 129, "steps_per_epoch": 50}),
    Run("compressive_abstractive_general", "compressive_abstractive", "qmsum_general", DECLARED,
        minutes=15, stop=44, overrides=QMSUM_GENERAL),
    Run("shte_scitldr", "shte", "scitldr_a", EARLY, minutes=8, overrides={"epochs": 100}),
    Run("flat_copy_scitldr", "flat", "scitldr_a", ROW_OF_RECORD, minutes=30, checkpoint="best",
        min_length_factor=1.0, overrides=SCITLDR_FLAT_COPY),
    Run("pht_fewsum_amazon", "pht", "fewsum_amazon", EARLY, minutes=8, overrides=FEWSUM_PHT),
    Run("pht_copy_fewsum_amazon", "pht", "fewsum_amazon", EARLY, minutes=8,
        overrides={**FEWSUM_PHT, "pointer_generator": True}),
    Run("pht_copy_fewsum_yelp", "pht", "fewsum_yelp", EARLY, minutes=8,
        overrides={**FEWSUM_PHT, "pointer_generator": True}),
    Run("compressive_abstractive_holdout_general", "compressive_abstractive", "qmsum_general",
        DIAGNOSIS, minutes=15, checkpoint="best", stop=44,
        overrides={**QMSUM_GENERAL, "validation_holdout": 0.15}),
    Run("discourse_500_long_sections_scisummnet", "discourse", "scisummnet", DECLARED, minutes=60,
        stop=42,
        overrides={**DISCOURSE, "max_section_length": 500, "epochs": 9, "coverage_start_epoch": 7}),
    Run("pht_copy_sections_scisummnet", "pht", "scisummnet", DECLARED, minutes=55,
        checkpoint="best", stop=42, overrides=SCISUMMNET_PHT_COPY),
    Run("pht_copy_last_sections_scisummnet", "pht", "scisummnet", DECLARED,
        base="pht_copy_sections_scisummnet", checkpoint="last", stop=42),
    Run("pht_copy_allrefs_fewsum_amazon", "pht", "fewsum_amazon", EARLY, minutes=20,
        overrides=FEWSUM_TUNED),
    Run("pht_copy_loo_fewsum_amazon", "pht", "fewsum_amazon", STAGE, minutes=35,
        pretraining="leave-one-out pretraining", evaluate=False, overrides=FEWSUM_LOO_COPY),
    Run("pht_copy_loo_tuned_fewsum_amazon", "pht", "fewsum_amazon", EARLY, minutes=20,
        init_from="pht_copy_loo_fewsum_amazon", overrides=FEWSUM_TUNED),
    Run("pht_copy_loo_tuned_best_fewsum_amazon", "pht", "fewsum_amazon", EXTRA,
        base="pht_copy_loo_tuned_fewsum_amazon", checkpoint="best"),
    Run("pht_copy_allrefs_fewsum_yelp", "pht", "fewsum_yelp", EARLY, minutes=20,
        overrides=FEWSUM_TUNED),
    Run("pht_copy_loo_fewsum_yelp", "pht", "fewsum_yelp", STAGE, minutes=35,
        pretraining="leave-one-out pretraining", evaluate=False, overrides=FEWSUM_LOO_COPY),
    Run("pht_copy_loo_tuned_fewsum_yelp", "pht", "fewsum_yelp", EARLY, minutes=20,
        init_from="pht_copy_loo_fewsum_yelp", overrides=FEWSUM_TUNED),
    Run("pht_copy_loo_tuned_best_fewsum_yelp", "pht", "fewsum_yelp", EXTRA,
        base="pht_copy_loo_tuned_fewsum_yelp", checkpoint="best"),
    Run("pht_copy_loo_reviews", "pht", "fewsum_reviews", STAGE, minutes=35, data="fewsum_reviews",
        pretraining="leave-one-out pretraining on both FewSum sets", evaluate=False,
        overrides={**FEWSUM_LOO_COPY, "epochs": 400}),
    Run("pht_copy_reviews_tuned_fewsum_amazon", "pht", "fewsum_amazon", ROW_OF_RECORD, minutes=10,
        checkpoint="best", init_from="pht_copy_loo_reviews", min_length_factor=1.0,
        overrides={**FEWSUM_BOTHSETS, "validation_holdout": 0.15}),
    Run("pht_copy_reviews_refit_fewsum_amazon", "pht", "fewsum_amazon", EXTRA, minutes=10,
        init_from="pht_copy_loo_reviews", min_length_factor=1.0,
        overrides={**FEWSUM_TUNED, "epochs": 3}),
    Run("pht_copy_reviews_tuned_fewsum_yelp", "pht", "fewsum_yelp", ROW_OF_RECORD, minutes=10,
        checkpoint="best", init_from="pht_copy_loo_reviews", min_length_factor=1.0,
        overrides={**FEWSUM_BOTHSETS, "validation_holdout": 0.15}),
    Run("pht_copy_reviews_refit_fewsum_yelp", "pht", "fewsum_yelp", EXTRA, minutes=10,
        init_from="pht_copy_loo_reviews", min_length_factor=1.0,
        overrides={**FEWSUM_TUNED, "epochs": 5}),
    Run("flat_copy_principal_science", "flat", "scitldr_science", STAGE, minutes=35,
        data="scitldr_science", pretraining="principal-sentence pretraining on scientific text",
        evaluate=False,
        overrides={**SCITLDR_FLAT_COPY, "validation_holdout": 0.0,
                   "train_references": "principal_sentence"}),
    Run("flat_copy_principal_tuned_scitldr", "flat", "scitldr_a", DECLARED, minutes=20,
        checkpoint="best", init_from="flat_copy_principal_science", min_length_factor=1.0,
        overrides=SCITLDR_FLAT_COPY),
    Run("flat_copy_shift_scitldr", "flat", "scitldr_a", DECLARED, minutes=30, checkpoint="best",
        min_length_factor=1.4, overrides=SCITLDR_FLAT_SHIFT),
    Run("flat_copy_shift_goldspan", "flat", "qmsum_goldspan", DECLARED, minutes=20,
        overrides={**GOLDSPAN_FLAT, "pointer_generator": True, "token_shift": True}),
    Run("ht_copy_shift_goldspan", "ht", "qmsum_goldspan", DECLARED, minutes=20,
        overrides={**HT_COPY, "token_shift": True}),
    Run("flat_copy_principal_shift_science", "flat", "scitldr_science", STAGE, minutes=35,
        data="scitldr_science", pretraining="principal-sentence pretraining on scientific text",
        evaluate=False,
        overrides={**SCITLDR_FLAT_COPY, "validation_holdout": 0.0,
                   "train_references": "principal_sentence", "token_shift": True}),
    Run("flat_copy_principal_shift_tuned_scitldr", "flat", "scitldr_a", DECLARED, minutes=20,
        checkpoint="best", init_from="flat_copy_principal_shift_science", min_length_factor=1.0,
        overrides=SCITLDR_FLAT_SHIFT),
    Run("flat_copy_gap_shift_science", "flat", "scitldr_science", STAGE, minutes=35,
        data="scitldr_science", pretraining="gap-sentence pretraining on scientific text",
        evaluate=False,
        overrides={**SCITLDR_FLAT_COPY, "validation_holdout": 0.0,
                   "train_references": "gap_sentence", "token_shift": True}),
    Run("flat_copy_gap_shift_tuned_scitldr", "flat", "scitldr_a", DECLARED, minutes=20,
        checkpoint="best", init_from="flat_copy_gap_shift_science", min_length_factor=1.0,
        overrides=SCITLDR_FLAT_SHIFT),
    Run("pht_copy_shift_loo_reviews", "pht", "fewsum_reviews", STAGE, minutes=35,
        data="fewsum_reviews", pretraining="leave-one-out pretraining on both FewSum sets",
        evaluate=False, overrides={**FEWSUM_LOO_COPY, "epochs": 400, "token_shift": True}),
    Run("pht_copy_shift_reviews_tuned_fewsum_amazon", "pht", "fewsum_amazon", DECLARED, minutes=10,
        checkpoint="best", init_from="pht_copy_shift_loo_reviews", min_length_factor=1.0,
        overrides={**FEWSUM_BOTHSETS, "validation_holdout": 0.15, "token_shift": True}),
    Run("pht_copy_shift_reviews_frombest_fewsum_amazon", "pht", "fewsum_amazon", DECLARED,
        minutes=10, checkpoint="best", init_from="pht_copy_shift_loo_reviews",
        init_checkpoint="best", min_length_factor=1.0,
        overrides={**FEWSUM_BOTHSETS, "validation_holdout": 0.15, "token_shift": True}),
    Run("flat_copy_shift_wide_scitldr", "flat", "scitldr_a", DECLARED, minutes=50,
        checkpoint="best", min_length_factor=1.4,
        overrides={**SCITLDR_FLAT_SHIFT, "hidden_dim": 256, "intermediate_dim": 1024}),
    Run("flat_copy_shift_wide_lr_scitldr", "flat", "scitldr_a", DECLARED, minutes=40,
        checkpoint="best", min_length_factor=1.4,
        overrides={**SCITLDR_FLAT_SHIFT, "hidden_dim": 256, "intermediate_dim": 1024,
                   "learning_rate": 0.7}),
    Run("pht_copy_loo_reviews_again", "pht", "fewsum_reviews", STAGE, minutes=35,
        data="fewsum_reviews", pretraining="leave-one-out pretraining on both FewSum sets",
        evaluate=False, overrides={**FEWSUM_LOO_COPY, "epochs": 400}),
    Run("pht_copy_reviews_frombest_fewsum_amazon", "pht", "fewsum_amazon", DECLARED, minutes=10,
        checkpoint="best", init_from="pht_copy_loo_reviews_again", init_checkpoint="best",
        min_length_factor=1.0, overrides={**FEWSUM_BOTHSETS, "validation_holdout": 0.15}),
    Run("flat_copy_shift_allholdout_scitldr", "flat", "scitldr_a", DECLARED, minutes=30,
        checkpoint="best", min_length_factor=1.4,
        overrides={**SCITLDR_FLAT_SHIFT, "max_val_examples": None, "validation_steps": None}),
    Run("flat_copy_shift_ema_scitldr", "flat", "scitldr_a", DECLARED, minutes=30,
        checkpoint="best", min_length_factor=1.4,
        overrides={**SCITLDR_FLAT_SHIFT, "ema_momentum": 0.999}),
    Run("flat_copy_shift_v4k_scitldr", "flat", "scitldr_a", DECLARED, minutes=30,
        checkpoint="best", min_length_factor=1.4,
        overrides={**SCITLDR_FLAT_SHIFT, "vocabulary_size": 4000}),
    Run("pht_copy_loo_reviews_third", "pht", "fewsum_reviews", STAGE, minutes=35,
        data="fewsum_reviews", pretraining="leave-one-out pretraining on both FewSum sets",
        evaluate=False, stop=27, overrides={**FEWSUM_LOO_COPY, "epochs": 400}),
    Run("pht_copy_reviews_third_tuned_fewsum_amazon", "pht", "fewsum_amazon", CANDIDATE,
        minutes=10, checkpoint="best", init_from="pht_copy_loo_reviews_third",
        min_length_factor=1.0, stop=27, overrides={**FEWSUM_BOTHSETS, "validation_holdout": 0.15}),
    Run("pht_copy_bothsets_tuned_fewsum_amazon", "pht", "fewsum_amazon", CANDIDATE, minutes=10,
        checkpoint="best", data="fewsum_bothsets", init_from="pht_copy_loo_reviews_third",
        label="both sets' references", holdout_of=("fewsum_amazon", 0.15), min_length_factor=1.1,
        beam_size=16, mbr=True, sampling={"epsilon": 0.02, "seed": 0}, stop=27,
        overrides=FEWSUM_BOTHSETS),
    Run("flat_copy_shift_acc_scitldr", "flat", "scitldr_a", CANDIDATE, minutes=30,
        checkpoint="best", min_length_factor=1.2, beam_size=8, mbr=True, stop=27,
        overrides=SCITLDR_FLAT_ACC),
    Run("flat_copy_shift_drop3_scitldr", "flat", "scitldr_a", CANDIDATE, minutes=30,
        checkpoint="best", label="dropout 0.3", min_length_factor=1.2, beam_size=8, stop=28,
        overrides={**SCITLDR_FLAT_ACC, "dropout": 0.3}),
    Run("flat_copy_shift_drop1_scitldr", "flat", "scitldr_a", CANDIDATE, minutes=30,
        checkpoint="best", label="dropout 0.1", min_length_factor=1.2, beam_size=8, stop=28,
        overrides={**SCITLDR_FLAT_ACC, "dropout": 0.1}),
    Run("flat_copy_shift_titles_scitldr", "flat", "scitldr_a", CANDIDATE, minutes=30,
        checkpoint="best", data="scitldr_titles", label="ScisummNet titles (CATTS)",
        holdout_of=("scitldr_a", 0.1), min_length_factor=1.2, beam_size=8, mbr=True, stop=29,
        overrides={**SCITLDR_FLAT_ACC, "validation_holdout": 199 / 2588}),
    Run("flat_copy_shift_rl_scitldr", "flat", "scitldr_a", CANDIDATE, minutes=25,
        checkpoint="best", init_from="flat_copy_shift_acc_scitldr", init_checkpoint="best",
        label="sequence-level ROUGE training (REINFORCE, weight 0.9)", min_length_factor=1.2,
        beam_size=8, mbr=True, stop=31, overrides={**SCITLDR_REINFORCE, "reinforce_weight": 0.9}),
    Run("flat_copy_shift_rl99_scitldr", "flat", "scitldr_a", CANDIDATE, minutes=25,
        checkpoint="best", init_from="flat_copy_shift_acc_scitldr", init_checkpoint="best",
        label="sequence-level ROUGE training (REINFORCE, weight 0.99)", min_length_factor=1.0,
        beam_size=8, mbr=True, stop=31, overrides=SCITLDR_REINFORCE),
    Run("flat_copy_shift_acc15_scitldr", "flat", "scitldr_a", STAGE, minutes=15, checkpoint="best",
        min_length_factor=1.2, beam_size=8, mbr=True, evaluate=False, stop=32,
        overrides=SCITLDR_FLAT_ACC),
    Run("flat_copy_shift_rl99_long_scitldr", "flat", "scitldr_a", CANDIDATE, minutes=45,
        checkpoint="best", init_from="flat_copy_shift_acc15_scitldr", init_checkpoint="best",
        label="sequence-level ROUGE training (REINFORCE, weight 0.99, 45 minutes)",
        min_length_factor=1.2, beam_size=8, mbr=True, stop=32, overrides=SCITLDR_REINFORCE),
    Run("flat_copy_shift_rl99_epochs_scitldr", "flat", "scitldr_a", CANDIDATE, minutes=45,
        checkpoint="chosen_epoch", init_from="flat_copy_shift_acc15_scitldr",
        init_checkpoint="best",
        label="sequence-level ROUGE training (REINFORCE, weight 0.99, 45 minutes)",
        min_length_factor=1.2, beam_size=8, mbr=True, epoch_choice_part="a", stop=33,
        overrides={**SCITLDR_REINFORCE, "keep_epoch_checkpoints": True}),
    Run("pht_copy_bothsets_rl_fewsum_amazon", "pht", "fewsum_amazon", CANDIDATE, minutes=15,
        checkpoint="best", data="fewsum_bothsets",
        init_from="pht_copy_bothsets_tuned_fewsum_amazon", init_checkpoint="best",
        label="both sets' references + sequence-level ROUGE training (REINFORCE, weight 0.99)",
        holdout_of=("fewsum_amazon", 0.15), min_length_factor=1.1, beam_size=16, mbr=True,
        sampling={"epsilon": 0.02, "seed": 0}, stop=31, overrides=FEWSUM_REINFORCE),
    Run("pht_copy_bothsets_rl_alone_fewsum_amazon", "pht", "fewsum_amazon", CANDIDATE, minutes=15,
        checkpoint="best", data="fewsum_bothsets",
        init_from="pht_copy_bothsets_tuned_fewsum_amazon", init_checkpoint="best",
        label=("both sets' references + sequence-level ROUGE training (REINFORCE, weight 0.99), "
               "run alone"),
        holdout_of=("fewsum_amazon", 0.15), min_length_factor=1.1, beam_size=16, mbr=True,
        sampling={"epsilon": 0.02, "seed": 0}, stop=32, overrides=FEWSUM_REINFORCE),
    Run("flat_copy_shift_rl99_avg_scitldr", "flat", "scitldr_a", CANDIDATE, minutes=45,
        base="flat_copy_shift_rl99_epochs_scitldr", checkpoint="chosen_average",
        init_from="flat_copy_shift_acc15_scitldr", init_checkpoint="best",
        label="sequence-level ROUGE training (REINFORCE, weight 0.99, 45 minutes)",
        min_length_factor=1.2, beam_size=8, mbr=True, epoch_choice_part="a",
        average_last=(5, 10, 15), average_choice_part="a", stop=34,
        overrides={**SCITLDR_REINFORCE, "keep_epoch_checkpoints": True}),
    Run("flat_copy_shift_rl99_ens_scitldr", "flat", "scitldr_a", CANDIDATE, minutes=45,
        base="flat_copy_shift_rl99_epochs_scitldr", checkpoint="chosen_ensemble",
        init_from="flat_copy_shift_acc15_scitldr", init_checkpoint="best",
        label="sequence-level ROUGE training (REINFORCE, weight 0.99, 45 minutes)",
        min_length_factor=1.2, beam_size=8, mbr=True, epoch_choice_part="a",
        ensemble_last=(5, 10, 15), ensemble_best=3, ensemble_choice_part="a", stop=35,
        overrides={**SCITLDR_REINFORCE, "keep_epoch_checkpoints": True}),
    Run("ht_copy_shift_headnorm_goldspan", "ht", "qmsum_goldspan", DIAGNOSIS, minutes=20,
        label="head vectors layer-normalised (HT §3.3)", stop=39,
        overrides={**HT_COPY, "token_shift": True}),
    Run("pht_copy_shift_scisummnet", "pht", "scisummnet", EXTRA, minutes=55, checkpoint="best",
        stop=43, overrides={**SCISUMMNET_PHT_COPY, "token_shift": True}),
    Run("pht_copy_shift_last_scisummnet", "pht", "scisummnet", DECLARED,
        base="pht_copy_shift_scisummnet", checkpoint="last", stop=43),
    Run("pht_copy_sections_goldspan", "pht", "qmsum_goldspan", DECLARED, minutes=42, stop=43,
        overrides={**GOLDSPAN_PHT, "pointer_generator": True}),
)

RUN_BY_NAME = {run.name: run for run in RUNS}

# The rows that decide the target (each abstractive recipe beats
# TextRank on ROUGE-1 and ROUGE-2 on its dataset): per dataset and recipe,
# the row that docs/results.md's "Where the targets stand" counts. A
# re-measure replaces the row it re-measures. Several came after an earlier
# row of the same recipe had missed on the validation split, and the "why"
# says so: the table shows how each row came about, not only what it
# scored. Each value: (run, why this row).
TARGET_ROWS = {
    "qmsum_goldspan": [
        ("flat_copy_goldspan",
         "flat with copy: the copy rows came after the first rows without copy missed"),
        ("ht_copy_goldspan", "HT with copy, likewise"),
        ("pht_copy_sections_goldspan",
         "pht_copy_goldspan (PHT with copy, likewise) re-measured with sections marked"),
    ],
    "qmsum_general": [
        ("seal_general", "the only SEAL row"),
        ("extractive_abstractive_general", "the only EA row"),
        ("compressive_abstractive_general", "the only CA row, declared before it trained"),
    ],
    "scisummnet": [
        ("discourse_500_long_sections_scisummnet",
         "the fifth discourse spec (the first four missed), re-measured with sections marked"),
        ("pht_copy_last_sections_scisummnet",
         "pht_copy_last (its last weights, added after its best checkpoint missed) "
         "re-measured with sections marked"),
        ("pht_copy_shift_last_scisummnet", "the row above + token shift, declared after its miss"),
    ],
    "scitldr_a": [
        ("flat_copy_shift_rl99_scitldr",
         "row of record, chosen by declared rules on 199 held-out training papers"),
    ],
    "fewsum_amazon": [
        ("pht_copy_bothsets_tuned_fewsum_amazon",
         "row of record, chosen by declared rules on 4 held-out training products"),
    ],
    "fewsum_yelp": [
        ("pht_copy_reviews_tuned_fewsum_yelp",
         "row of record of the second FewSum protocol (the first one's row missed), "
         "chosen on 4 held-out training products"),
    ],
}

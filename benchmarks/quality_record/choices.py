"""The hold-out choices of the quality record, as data: which runs each
choice weighs together and the options it tries. Each was declared before it
ran; docs/results.md ("The run journal") says why, and the stored
results/quality/<kind>_choice_<group>.json what it picked.

`choose_length GROUP` picks a min_length factor, `choose_recent GROUP` the
recent-token blocking, `choose_beam GROUP` the beam width (with MBR or
sampling), `choose_row GROUP` a dataset's row of record (see
quality_record.choose).
"""

import dataclasses
from typing import Mapping, Optional, Tuple


@dataclasses.dataclass(frozen=True)
class Group:
    """Runs weighed together on their held-out training examples.

    Args:
        runs: the run names, pooled (`choose_length`, `choose_recent`,
            `choose_beam`) or compared (`choose_row`; ties: the first).
        options: the options tried, in order (ties: the first listed, except
            `choose_length`: the shorter factor); unused by `choose_row`.
        recorded: {run: recorded hold-out score} of a run whose folder is lost.
        part: "a" or "b": only that half of the held-out examples.
    """

    runs: Tuple[str, ...]
    options: Tuple = ()
    recorded: Mapping[str, float] = dataclasses.field(default_factory=dict)
    part: Optional[str] = None


LENGTH_FACTORS = (0.8, 1.0, 1.2)

LENGTH_GROUPS = {
    "fewsum": Group(("pht_copy_reviews_tuned_fewsum_amazon", "pht_copy_reviews_tuned_fewsum_yelp"),
                    LENGTH_FACTORS),
    "scitldr_a": Group(("flat_copy_scitldr", "flat_copy_principal_tuned_scitldr"), LENGTH_FACTORS),
    "scitldr_a_shift": Group(("flat_copy_shift_scitldr", "flat_copy_shift_wide_lr_scitldr"),
                             (0.8, 1.0, 1.2, 1.4, 1.6)),
    "scitldr_a_acc": Group(("flat_copy_shift_acc_scitldr",), (1.2, 1.4, 1.6)),
    "fewsum_amazon_sampling": Group(("pht_copy_bothsets_tuned_fewsum_amazon",), (1.0, 1.1, 1.25)),
    "scitldr_a_rl": Group(("flat_copy_shift_rl99_scitldr",), (1.0, 1.2, 1.4, 1.6)),
}

# Options: a window, or "<window> except <piece> <piece>..." (pieces that may repeat).
RECENT_GROUPS = {
    "scitldr_a_shift": Group(("flat_copy_shift_scitldr", "flat_copy_shift_ema_scitldr"), (2, 0)),
    "scitldr_a_punct": Group(("flat_copy_shift_scitldr", "flat_copy_shift_ema_scitldr"),
                             (2, "2 except ,", "2 except , -")),
}

# Options: a width, "<width> mbr", or "<n> sample[ epsilon=<e>][ mbr]".
BEAM_GROUPS = {
    "scitldr_a_acc": Group(("flat_copy_shift_acc_scitldr",), (4, 2, 8)),
    "scitldr_a_acc_wide": Group(("flat_copy_shift_acc_scitldr",), (8, 16)),
    "scitldr_a_mbr": Group(("flat_copy_shift_acc_scitldr",), (8, "8 mbr", "16 mbr")),
    "fewsum_amazon_mbr": Group(("pht_copy_bothsets_tuned_fewsum_amazon",), (4, "4 mbr", "8 mbr")),
    "scitldr_a_sampling": Group(("flat_copy_shift_acc_scitldr",),
                                ("8 mbr", "16 sample epsilon=0.02 mbr",
                                 "32 sample epsilon=0.02 mbr")),
    "fewsum_amazon_sampling": Group(("pht_copy_bothsets_tuned_fewsum_amazon",),
                                    ("4 mbr", "16 sample epsilon=0.02 mbr",
                                     "32 sample epsilon=0.02 mbr")),
}

ROW_GROUPS = {
    "fewsum_amazon_third": Group(("pht_copy_reviews_third_tuned_fewsum_amazon",
                                  "pht_copy_bothsets_tuned_fewsum_amazon")),
    # flat_copy_shift_scitldr's folder is lost: (31.06 + 10.97) / 2 / 100,
    # results/quality/scitldr_a_single_reference.json.
    "scitldr_a_monitor": Group(("flat_copy_shift_scitldr", "flat_copy_shift_acc_scitldr"),
                               recorded={"flat_copy_shift_scitldr": 0.21015}),
    "scitldr_a_dropout": Group(("flat_copy_shift_acc_scitldr", "flat_copy_shift_drop3_scitldr",
                                "flat_copy_shift_drop1_scitldr")),
    "scitldr_a_titles": Group(("flat_copy_shift_acc_scitldr", "flat_copy_shift_titles_scitldr")),
    "scitldr_a_reinforce": Group(("flat_copy_shift_acc_scitldr", "flat_copy_shift_rl_scitldr",
                                  "flat_copy_shift_rl99_scitldr")),
    "fewsum_amazon_reinforce": Group(("pht_copy_bothsets_tuned_fewsum_amazon",
                                      "pht_copy_bothsets_rl_fewsum_amazon")),
    "scitldr_a_reinforce_long": Group(("flat_copy_shift_rl99_scitldr",
                                       "flat_copy_shift_rl99_long_scitldr")),
    "fewsum_amazon_reinforce_alone": Group(("pht_copy_bothsets_tuned_fewsum_amazon",
                                            "pht_copy_bothsets_rl_alone_fewsum_amazon")),
    # Part "b": the half of the held-out papers that the checkpoint choices
    # among kept epochs (part "a") did not read.
    "scitldr_a_reinforce_epochs": Group(("flat_copy_shift_rl99_scitldr",
                                         "flat_copy_shift_rl99_epochs_scitldr"), part="b"),
    "scitldr_a_average": Group(("flat_copy_shift_rl99_scitldr",
                                "flat_copy_shift_rl99_avg_scitldr"), part="b"),
    "scitldr_a_ensemble": Group(("flat_copy_shift_rl99_scitldr",
                                 "flat_copy_shift_rl99_ens_scitldr"), part="b"),
}

"""The hold-out choices: each option of a group (quality_record.choices) is
exported, scored on the runs' held-out *training* examples (the validation
split is never read) and the highest pooled mean of ROUGE-1 and ROUGE-2 F1
wins; each writes results/quality/<kind>_choice_<group>.json."""

import json
import os
import statistics

from . import layout
from .choices import BEAM_GROUPS, LENGTH_GROUPS, RECENT_GROUPS, ROW_GROUPS
from .datasets import DATASETS, split_train_lines
from .runs import RUN_BY_NAME
from .steps import export, holdout_of, keras_hsum


def holdout_file(dataset, fraction, part=None):
    """The training examples that runs with `validation_holdout=fraction`
    validated on (never trained on), as a JSONL file; `part` "a" keeps the
    first half of them in file order (the larger when odd), "b" the rest."""
    lines = split_train_lines(dataset, fraction)[1]
    if part is not None:
        if part not in ("a", "b"):
            raise ValueError(f"part must be 'a' or 'b'; received {part!r}.")
        half = (len(lines) + 1) // 2
        lines = lines[:half] if part == "a" else lines[half:]
    suffix = f"_{part}" if part else ""
    path = os.path.join(layout.RUNS_DIR, f"holdout_{dataset}_{fraction}{suffix}.jsonl")
    with open(path, "w", encoding="utf-8") as handle:
        handle.writelines(lines)
    return path


def holdout_scores(names, options, export_option, part=None):
    """{option: pooled mean of ROUGE-1 and ROUGE-2 F1} of the runs `names`,
    each exported with every option (`export_option(option)`: the folder
    suffix and the `export` keyword arguments) and scored on its held-out
    *training* examples (`part`: only that half of them, see `holdout_file`)."""
    scores = {}
    for option in options:
        pooled = []
        for name in names:
            run = RUN_BY_NAME[name]
            suffix, kwargs = export_option(option)
            folder = os.path.join(layout.run_folder(name), suffix)
            export(name, out=os.path.join(folder, "export"), **kwargs)
            report = os.path.join(folder, f"holdout{'_' + part if part else ''}.json")
            keras_hsum(
                "evaluate", "--model", os.path.join(folder, "export"), "--name", name,
                "--data", holdout_file(*holdout_of(run), part=part),
                "--references", DATASETS[run.dataset]["references"], "--out", report,
            )
            with open(report, encoding="utf-8") as handle:
                pooled += [(e["scores"]["rouge1"]["f1"] + e["scores"]["rouge2"]["f1"]) / 2
                           for e in json.load(handle)["examples"]]
        scores[option] = statistics.mean(pooled)
    return scores


def _write_choice(kind, group, names, scores, choice):
    out = os.path.join(layout.RESULTS, f"{kind}_choice_{group}.json")
    with open(out, "w", encoding="utf-8") as handle:
        json.dump({"runs": list(names), "scores": scores, "choice": choice}, handle, indent=1)
    print(f"{kind} {choice}: {scores} -> {out}")


def choose_length(group):
    """One min_length factor for the runs of LENGTH_GROUPS[group]: each run
    exported with every factor (ties: the shorter)."""
    names, factors = list(LENGTH_GROUPS[group].runs), LENGTH_GROUPS[group].options
    scores = holdout_scores(
        names, factors, lambda factor: (f"length_{factor}", {"factor": factor}))
    choice = max(factors, key=lambda f: (scores[f], -f))
    _write_choice("length", group, names, scores, choice)
    return choice


def recent_option(option):
    """(window, exception pieces) of a RECENT_GROUPS option: a window (2)
    or "<window> except <piece> <piece>..." ("2 except , -")."""
    window, _, pieces = str(option).partition(" except ")
    return int(window), tuple(pieces.split())


def choose_recent(group):
    """One recent-token blocking option (window and exempt pieces) for the
    runs of RECENT_GROUPS[group], each run at its own min_length factor
    (ties: the option listed first, the default's side)."""
    names, options = list(RECENT_GROUPS[group].runs), RECENT_GROUPS[group].options

    def export_option(option):
        window, pieces = recent_option(option)
        # Folder names spell the pieces as code points ("," -> u002c).
        suffix = "".join(f"u{ord(c):04x}" for c in "".join(pieces))
        return (f"recent_{window}" + (f"_except_{suffix}" if pieces else ""),
                {"block_recent": window, "recent_exceptions": pieces})

    scores = holdout_scores(names, options, export_option)
    choice = max(options, key=lambda o: (scores[o], -options.index(o)))
    _write_choice("recent", group, names, scores, choice)
    return choice


def beam_option(option):
    """(width, mbr, sampling) of a BEAM_GROUPS option: a width (8), "<width>
    mbr" (MBR reranking of that many hypotheses, `keras-hsum export --mbr`)
    or "<n> sample[ epsilon=<e>][ top_p=<p>][ temperature=<t>][ mbr]" (n
    samples, `export --sample`, and their MBR choice)."""
    width, *words = str(option).split()
    sampling, mbr = {}, False
    for word in words:
        key, _, value = word.partition("=")
        if word == "mbr":
            mbr = True
        elif word == "sample":
            sampling.setdefault("seed", 0)
        elif key in ("epsilon", "top_p", "temperature") and value and "seed" in sampling:
            sampling[key] = float(value)
        else:
            raise ValueError(f"expected a beam option like 8, '8 mbr' or "
                             f"'16 sample epsilon=0.02 mbr'; received {option!r}")
    return int(width), mbr, sampling


def choose_beam(group):
    """One beam width (with or without MBR reranking or sampling) for the
    runs of BEAM_GROUPS[group], each run with its own other settings (ties:
    the option listed first, the default)."""
    names, widths = list(BEAM_GROUPS[group].runs), BEAM_GROUPS[group].options

    def export_option(option):
        width, mbr, sampling = beam_option(option)
        name = f"beam_{width}" + "".join(
            f"_{key}{value}" for key, value in sorted(sampling.items()) if key != "seed"
        ) + ("_sample" if sampling else "") + ("_mbr" if mbr else "")
        return name, {"beam_size": width, "mbr": mbr, "sampling": sampling}

    scores = holdout_scores(names, widths, export_option)
    choice = max(widths, key=lambda w: (scores[w], -widths.index(w)))
    _write_choice("beam", group, names, scores, choice)
    return choice


def choose_row(group):
    """The run of ROW_GROUPS[group] with the highest score on the held-out
    training examples they share, each exported with its own settings, or
    its recorded score (ties: the run listed first)."""
    names, recorded, part = (list(ROW_GROUPS[group].runs), ROW_GROUPS[group].recorded,
                             ROW_GROUPS[group].part)
    if len({holdout_of(RUN_BY_NAME[name]) for name in names}) != 1:
        raise ValueError(f"{group}: the runs {names} were not held out on the same examples.")
    scores = {name: recorded[name] if name in recorded else
              holdout_scores([name], [None], lambda _: ("holdout_own", {}), part=part)[None]
              for name in names}
    choice = max(names, key=lambda n: (scores[n], -names.index(n)))
    _write_choice("row", group, names, scores, choice)
    return choice


def choose_epoch(name):
    """The kept epoch (`keep_epoch_checkpoints`) of the run `name` whose
    summaries, decoded as the row serves them, score highest on the half
    `epoch_choice_part` of its held-out training examples (ties: the earlier
    epoch). Writes epoch_choice_<name>.json, which `checkpoint_of` reads."""
    from keras_hsum.training.checkpoints import kept_epochs

    epochs = kept_epochs(layout.run_folder(name))
    if not epochs:
        raise ValueError(f"{name}: its run folder kept no epoch's weights.")
    scores = holdout_scores(
        [name], epochs,
        lambda epoch: (os.path.join("epoch_choice", f"epoch-{epoch:03d}"),
                       {"checkpoint": f"epoch-{epoch}"}),
        part=RUN_BY_NAME[name].epoch_choice_part)
    choice = max(epochs, key=lambda epoch: (scores[epoch], -epoch))
    _write_choice("epoch", name, [name], scores, choice)
    return choice


def _base_kept_epochs(name):
    """The kept epochs of the run that the run `name` exports (its `base`)."""
    from keras_hsum.training.checkpoints import kept_epochs

    base = RUN_BY_NAME[name].base
    epochs = kept_epochs(layout.run_folder(base))
    if not epochs:
        raise ValueError(f"{name}: the run folder of {base} kept no epoch's weights.")
    return epochs


def _choose_checkpoint(kind, name, candidates, folder_of, tie):
    """The checkpoint name among `candidates` (of the run that `name`
    exports) whose summaries, decoded as the row serves them, score highest
    on the half `<kind>_choice_part` of the held-out training examples
    (ties: the highest `tie(candidate)`). Each export lives in
    `<kind>_choice/<folder_of(c)>`; writes <kind>_choice_<name>.json, which
    `checkpoint_of` reads."""
    scores = holdout_scores(
        [name], candidates,
        lambda c: (os.path.join(f"{kind}_choice", folder_of(c)), {"checkpoint": c}),
        part=getattr(RUN_BY_NAME[name], f"{kind}_choice_part"))
    choice = max(candidates, key=lambda c: (scores[c], *tie(c)))
    _write_choice(kind, name, [name], scores, choice)
    return choice


def choose_average(name):
    """The window of checkpoint averaging for the run `name` (an export of
    its base run's kept epochs): the mean of the last k kept epochs, for k in
    its `average_last` (ties: the window listed first)."""
    last = _base_kept_epochs(name)[-1]
    windows = [f"epochs-{last - k + 1}-{last}" for k in RUN_BY_NAME[name].average_last]
    return _choose_checkpoint("average", name, windows, lambda window: window,
                              lambda window: (-windows.index(window),))


def ensemble_options(name):
    """{checkpoint name: members} of the snapshot ensembles the run `name`
    chooses among (an export of its base run's kept epochs): the last k kept
    epochs, for k in its `ensemble_last`, then the `ensemble_best` epochs of
    highest score in the base run's epoch choice (`choose_epoch`)."""
    run = RUN_BY_NAME[name]
    epochs = _base_kept_epochs(name)
    groups = [epochs[-k:] for k in run.ensemble_last or ()]
    if run.ensemble_best:
        path = os.path.join(layout.RESULTS, f"epoch_choice_{run.base}.json")
        if not os.path.exists(path):
            raise ValueError(f"{name}: run `quality.py choose_epoch {run.base}` first.")
        with open(path, encoding="utf-8") as handle:
            scored = json.load(handle)["scores"]
        ranked = sorted(epochs, key=lambda epoch: (-scored[str(epoch)], epoch))
        groups.append(sorted(ranked[:run.ensemble_best]))
    return {"+".join(f"epoch-{e}" for e in group): len(group) for group in groups}


def choose_ensemble(name):
    """The snapshot ensemble for the run `name` among `ensemble_options`
    (ties: the fewer members, then the option listed first)."""
    options = ensemble_options(name)
    names = list(options)
    return _choose_checkpoint(
        "ensemble", name, names, lambda c: f"members-{options[c]}-{names.index(c)}",
        lambda c: (-options[c], -names.index(c)))

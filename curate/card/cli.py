"""`curate card`."""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import BadInput


@click.command("card")
@click.argument("build_dir", default="build", type=click.Path(file_okay=False))
@click.option("--repo", "repo_id", help="Hub repo the card is for (ORG/NAME), used in the "
              "loading example. Default: ORG/NAME.")
@click.option("--name", "pretty_name", help="Human-readable dataset name (pretty_name).")
@click.option("--val-fraction", type=float, default=None,
              help="Re-split the shards: put about this fraction of the rows in a validation "
                   "split, by whole dedup clusters (data/ and infill/ alike). 0 merges back.")
@click.option("--seed", default="curate", show_default=True,
              help="Seed of the cluster order for --val-fraction.")
def card(build_dir, repo_id, pretty_name, val_fraction, seed):
    """Render BUILD_DIR/README.md (the dataset card) and BUILD_DIR/assets/*.png.

    The card's YAML front matter makes `load_dataset(repo)` and `load_dataset(repo, "infill")`
    work on the Hub. Text between `<!-- curate:begin NAME -->` and `<!-- curate:end NAME -->` is
    yours: rendering again keeps it. Review the card and its plots before `curate push`.

    \b
    Example:
      curate card build
      curate card build --repo org/cuke --val-fraction 0.05
    """
    build = Path(build_dir)
    if val_fraction is not None:
        if not 0 <= val_fraction < 1:
            raise BadInput(f"--val-fraction {val_fraction} is outside [0, 1)",
                           fix="pass e.g. --val-fraction 0.05")
        from ..hub.shards import resplit_folder
        out, chosen = resplit_folder(build / "data", val_fraction, seed=seed)
        if not out:
            raise BadInput("no shards to split (data/ is empty)", path=str(build / "data"),
                           fix="run `curate build` first")
        infill, _ = resplit_folder(build / "infill", val_fraction, seed=seed, chosen=chosen)
        import json
        (build / "splits.json").write_text(json.dumps(
            {"val_fraction": val_fraction, "seed": seed, "by": "cluster_id"}, indent=2) + "\n")
        for folder, splits in (("data", out), ("infill", infill)):
            if splits:
                click.echo(f"{folder}: " + ", ".join(f"{s} {len(p)} shard(s)"
                                                     for s, p in splits.items()))
    from .render import render_card
    c = render_card(build, repo_id=repo_id, pretty_name=pretty_name)
    f = c.facts
    click.echo(f"card: {c.path} ({f.kept} pairs"
               + (f", {f.configs[1].rows} infill rows" if len(f.configs) > 1 else "")
               + f"), plots: {', '.join(sorted(c.assets.values()))}")
    if c.backup:
        click.echo(f"  {c.path} was not written by curate: saved as {c.backup}", err=True)
    if c.kept_sections:
        click.echo(f"  kept hand-written sections: {', '.join(c.kept_sections)}")
    if not f.decontamination["done"]:
        click.echo("  note: the card states that no decontamination was done", err=True)

"""`curate push`."""

from __future__ import annotations

import click

from ..cli import FiniteFloat


@click.command("push")
@click.argument("build_dir", default="build", type=click.Path(file_okay=False))
@click.option("--repo", "repo_id", required=True, help="Dataset repo on the Hub: ORG/NAME.")
@click.option("--private", is_flag=True, help="Create the repo private (an existing repo keeps "
              "its visibility).")
@click.option("--revision", help="Branch to commit to (created from main if missing). "
              "Default: main.")
@click.option("--create-pr", is_flag=True, help="Open a pull request instead of committing to "
              "the branch.")
@click.option("--dry-run", is_flag=True, help="Print what would be uploaded, skipped and deleted; "
              "change nothing.")
@click.option("--allow-empty", is_flag=True, help="Push even when the build kept no pairs.")
@click.option("--message", "-m", help="Commit message (default: counts of the build).")
@click.option("--retries", type=click.IntRange(0, 20), default=4, show_default=True,
              help="Retries of a step that failed on the network or a 429/5xx answer.")
@click.option("--backoff", type=FiniteFloat(min=0), default=2.0, show_default=True, hidden=True,
              help="Seconds before the first retry (doubles each time).")
def push(build_dir, repo_id, private, revision, create_pr, dry_run, allow_empty, message, retries,
         backoff):
    """Upload a build's shards, dataset card and plots to a Hub dataset repo, in one commit.

    The token comes from HF_TOKEN or the stored login (`hf auth login`). A push that fails
    leaves the remote as it was; run it again to resume (files already uploaded, and files whose
    content the repo already holds, are skipped). Shards the build no longer has are deleted from
    data/ and infill/ in the same commit. The card (README.md) is rendered first when it is
    missing or older than the build; HF_ENDPOINT points the command at another Hub.

    \b
    Example:
      curate push --repo org/cuke
      curate push build --repo org/cuke --dry-run
      curate push --repo org/cuke --revision v2 --create-pr
    """
    import logging

    from .push import describe, push as do_push

    for name in ("httpx", "httpx2"):  # one line per HTTP request is noise here; -v keeps it
        if not logging.getLogger().isEnabledFor(logging.DEBUG):
            logging.getLogger(name).setLevel(logging.WARNING)

    res = do_push(build_dir, repo_id, private=private, revision=revision, create_pr=create_pr,
                  dry_run=dry_run, allow_empty=allow_empty, message=message, retries=retries,
                  backoff=backoff, say=lambda m: click.echo(m, err=True))
    plan = res.plan
    if dry_run:
        for line in describe(plan):
            click.echo(line)
        click.echo("dry run: nothing was uploaded")
        return
    up, skip, dele = plan.of("upload"), plan.of("skip"), plan.of("delete")
    if res.commit_url is None and res.pr_url is None:
        click.echo(f"{repo_id}: already up to date ({len(skip)} files unchanged)")
        return
    click.echo(f"pushed {len(up)} files ({sum(o.size for o in up) / 1e6:.1f} MB), "
               f"skipped {len(skip)} unchanged, deleted {len(dele)} -> {repo_id}")
    click.echo(f"  {res.pr_url or res.commit_url}")

"""The `div` entry point: one group, one module per noun wired in here."""
import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="divergent", prog_name="div")
def cli() -> None:
    """divergent: run code on your org's GPUs."""

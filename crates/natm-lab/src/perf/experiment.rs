//! One shape for every experiment of `natm-lab perf`: it measures into a typed result
//! (its JSON document), and [`drive`] does the rest the same way for all of them —
//! the progress bar, the figure, `--save`, and `--json` or the table on stdout.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use indicatif::ProgressBar;
use serde::de::DeserializeOwned;
use serde::Serialize;

use natm_cli::cli::CliResult;

/// Where an experiment's results go; every experiment has these options.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct OutputArgs {
    /// Print one JSON document instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
    /// Also write the JSON document to this file (the table still goes to stdout).
    #[arg(long)]
    pub(crate) save: Option<PathBuf>,
    /// Draw the figure into this SVG file, and the same as PNG beside it.
    #[arg(long)]
    pub(crate) figure: Option<PathBuf>,
}

/// An experiment: its command-line arguments are `Self`.
pub(crate) trait Experiment {
    /// What it measured: the JSON document, which `perf all` reads back.
    type Result: Serialize + DeserializeOwned;
    /// What the figure needs beyond the result (e.g. every sample), or `()`.
    type Figure;

    /// Where the results go.
    fn output(&self) -> &OutputArgs;

    /// Check the arguments and measure; `progress` is the driver's bar, whose length
    /// the experiment sets and which it advances once per measurement.
    fn run(&self, progress: &ProgressBar) -> anyhow::Result<(Self::Result, Self::Figure)>;

    /// The result as a table for people; from the result alone, so that a saved
    /// document gives the same table.
    fn table(result: &Self::Result) -> String;

    /// Draw the figure into `path` (SVG, and PNG beside it).
    fn figure(result: &Self::Result, extra: &Self::Figure, path: &Path) -> anyhow::Result<()>;
}

/// Run an experiment and hand its results out as its [`OutputArgs`] ask.
pub(crate) fn drive<E: Experiment>(e: &E) -> CliResult {
    let pb = super::progress(0);
    let measured = e.run(&pb);
    pb.finish_and_clear();
    let (result, extra) = measured?;
    emit::<E>(e.output(), &result, &extra)
}

/// The output half of [`drive`]: figure, `--save`, then the JSON or the table.
fn emit<E: Experiment>(out: &OutputArgs, result: &E::Result, extra: &E::Figure) -> CliResult {
    if let Some(path) = &out.figure {
        E::figure(result, extra, path)
            .with_context(|| format!("cannot draw the figure {}", path.display()))?;
    }
    let doc = || serde_json::to_string_pretty(result).context("cannot write the results as JSON");
    if let Some(path) = &out.save {
        let doc = doc()?;
        std::fs::write(path, format!("{doc}\n"))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    if out.json {
        let doc = doc()?;
        natm_cli::outln!("{doc}");
    } else {
        natm_cli::outln!(
            "{}",
            natm_cli::cli::table::wrap(&E::table(result)).trim_end_matches('\n')
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use std::cell::Cell;

    /// A stand-in experiment: counts how often each part was called.
    struct Fake {
        out: OutputArgs,
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Doc {
        experiment: String,
        value: f64,
    }

    thread_local! {
        static DRAWN: Cell<usize> = const { Cell::new(0) };
    }

    impl Experiment for Fake {
        type Result = Doc;
        type Figure = ();
        fn output(&self) -> &OutputArgs {
            &self.out
        }
        fn run(&self, progress: &ProgressBar) -> anyhow::Result<(Doc, ())> {
            progress.set_length(2);
            progress.inc(2);
            Ok((
                Doc {
                    experiment: "fake".into(),
                    value: 1.5,
                },
                (),
            ))
        }
        fn table(r: &Doc) -> String {
            format!("{} {}\n", r.experiment, r.value)
        }
        fn figure(_: &Doc, (): &(), path: &Path) -> anyhow::Result<()> {
            DRAWN.with(|d| d.set(d.get() + 1));
            std::fs::write(path, "<svg/>")?;
            Ok(())
        }
    }

    #[test]
    fn the_driver_saves_the_document_and_draws_the_figure() {
        let dir = std::env::temp_dir().join(format!("natm-drive-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let e = Fake {
            out: OutputArgs {
                json: false,
                save: Some(dir.join("fake.json")),
                figure: Some(dir.join("fake.svg")),
            },
        };
        drive(&e).unwrap();
        assert_eq!(DRAWN.with(Cell::get), 1);
        let saved: Doc =
            serde_json::from_str(&std::fs::read_to_string(dir.join("fake.json")).unwrap()).unwrap();
        assert_eq!(Fake::table(&saved), "fake 1.5\n");
        assert!(dir.join("fake.svg").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_failed_run_writes_nothing() {
        struct Fails(OutputArgs);
        impl Experiment for Fails {
            type Result = Doc;
            type Figure = ();
            fn output(&self) -> &OutputArgs {
                &self.0
            }
            fn run(&self, _: &ProgressBar) -> anyhow::Result<(Doc, ())> {
                anyhow::bail!("no stack")
            }
            fn table(_: &Doc) -> String {
                String::new()
            }
            fn figure(_: &Doc, (): &(), _: &Path) -> anyhow::Result<()> {
                Ok(())
            }
        }
        let path = std::env::temp_dir().join(format!("natm-fails-{}.json", std::process::id()));
        let e = Fails(OutputArgs {
            save: Some(path.clone()),
            ..OutputArgs::default()
        });
        assert_eq!(drive(&e).unwrap_err().to_string(), "no stack");
        assert!(!path.exists());
    }
}

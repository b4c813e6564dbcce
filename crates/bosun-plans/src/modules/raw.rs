//! `command` (an argv, no shell), `shell` (`sh -c`) and `script` (a local file uploaded
//! to a private temporary path, run with its arguments, removed). Raw commands are not
//! idempotent: a run that exits 0 counts as changed, and a dry run cannot know what
//! they would change. What they print is watched as they print it ([`Remote::live`]).

use super::{shell_words, ModuleError, Outcome, Remote, RenderedModule};
use crate::connection::{CommandSpec, Output};
use crate::modules::Change;

fn finish(what: String, output: Output) -> Result<Outcome, ModuleError> {
    if output.exit_code != Some(0) {
        return Err(ModuleError::Failed {
            what: String::new(),
            output,
        });
    }
    Ok(Outcome {
        exit_code: output.exit_code,
        stdout: output.stdout,
        stderr: output.stderr,
        ..Outcome::new(Change::Changed, format!("ran: {what}"))
    })
}

async fn read_script(src: &std::path::Path) -> Result<Vec<u8>, ModuleError> {
    tokio::fs::read(src).await.map_err(|e| ModuleError::Local {
        path: src.display().to_string(),
        reason: e.to_string(),
    })
}

pub(super) async fn apply(
    module: &RenderedModule,
    remote: &Remote<'_>,
) -> Result<Outcome, ModuleError> {
    match module {
        RenderedModule::Command { argv } => {
            if argv.is_empty() {
                return Err(ModuleError::Invalid("command: empty argv".into()));
            }
            let output = remote
                .run_watched(CommandSpec::Argv(argv.clone()), None)
                .await?;
            finish(shell_words(argv), output)
        }
        RenderedModule::Shell { cmd } => {
            let output = remote
                .run_watched(CommandSpec::Shell(cmd.clone()), None)
                .await?;
            finish(cmd.clone(), output)
        }
        RenderedModule::Script { src, args } => {
            let script = read_script(src).await?;
            let output = remote.run_script(&script, args).await?;
            let mut shown = vec![src.display().to_string()];
            shown.extend(args.iter().cloned());
            finish(format!("script {}", shell_words(&shown)), output)
        }
        _ => Err(ModuleError::Invalid(
            "not a raw command (internal error)".into(),
        )),
    }
}

pub(super) async fn predict(module: &RenderedModule) -> Result<Outcome, ModuleError> {
    let what = match module {
        RenderedModule::Command { argv } => shell_words(argv),
        RenderedModule::Shell { cmd } => cmd.clone(),
        RenderedModule::Script { src, args } => {
            // The script must exist for the real run to upload it.
            read_script(src).await?;
            let mut shown = vec![src.display().to_string()];
            shown.extend(args.iter().cloned());
            format!("script {}", shell_words(&shown))
        }
        _ => {
            return Err(ModuleError::Invalid(
                "not a raw command (internal error)".into(),
            ))
        }
    };
    Ok(Outcome::new(
        Change::Unknown,
        format!("would run: {what} (cannot know: a raw command is not idempotent)"),
    ))
}

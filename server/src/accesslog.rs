//! The access log's writer: a thread of its own that drains every worker's bounded queue
//! (router::accesslog formats the lines there) into standard output or a file.
//!
//! The workers never wait for it: a full queue drops the line and counts it. The file is
//! appended to and reopened on SIGUSR1, so logrotate can move it away and signal
//! (`postrotate kill -USR1 <pid>`); writes are buffered and flushed whenever the queues run
//! dry, so a quiet server's log is never behind by more than a line's delivery.

use std::cell::RefCell;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::PathBuf;
use std::rc::Rc;

use anyhow::Context as _;
use ferrodir_router::accesslog::LogFormat;
use tokio::sync::mpsc;

use crate::config::AccessLog as Settings;

/// Where the lines go.
enum Output {
    Stdout(std::io::BufWriter<std::io::Stdout>),
    File(std::io::BufWriter<std::fs::File>, PathBuf),
}

impl Output {
    fn open(path: &str) -> anyhow::Result<Self> {
        if path == "-" {
            return Ok(Output::Stdout(std::io::BufWriter::new(std::io::stdout())));
        }
        let path = PathBuf::from(path);
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("opening the access log {}", path.display()))?;
        Ok(Output::File(std::io::BufWriter::new(file), path))
    }

    fn writer(&mut self) -> &mut dyn Write {
        match self {
            Output::Stdout(w) => w,
            Output::File(w, _) => w,
        }
    }

    /// After logrotate moved the file away: the same path, anew.
    fn reopen(&mut self) {
        if let Output::File(_, path) = self {
            let path = path.display().to_string();
            let _ = self.writer().flush();
            match Output::open(&path) {
                Ok(fresh) => *self = fresh,
                Err(e) => {
                    tracing::error!(error = format!("{e:#}"), "cannot reopen the access log; writing on")
                }
            }
        }
    }
}

/// The format named in the config.
pub fn format(settings: &Settings) -> anyhow::Result<LogFormat> {
    match settings.format.as_str() {
        "text" => Ok(LogFormat::Text),
        "json" => Ok(LogFormat::Json),
        other => anyhow::bail!("[access_log] format {other:?}: use \"text\" (389-ds's format) or \"json\""),
    }
}

/// Opens the output and starts the writer thread; returns one sender per worker. None
/// when the log is off.
pub fn start(settings: &Settings, workers: usize) -> anyhow::Result<Option<Vec<mpsc::Sender<String>>>> {
    if !settings.enabled {
        return Ok(None);
    }
    format(settings)?;
    let output = Output::open(&settings.path)?;
    let per_worker = (settings.queue_lines_max / workers.max(1)).max(1);
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..workers).map(|_| mpsc::channel(per_worker)).unzip();
    std::thread::Builder::new().name("access-log".into()).spawn(move || {
        let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(runtime) => runtime,
            Err(e) => {
                tracing::error!(error = %e, "no access log: cannot start its runtime");
                return;
            }
        };
        let local = tokio::task::LocalSet::new();
        local.block_on(&runtime, write_all(output, receivers));
    })?;
    Ok(Some(senders))
}

async fn write_all(output: Output, receivers: Vec<mpsc::Receiver<String>>) {
    let output = Rc::new(RefCell::new(output));
    let mut drains = Vec::new();
    for mut queue in receivers {
        let output = output.clone();
        drains.push(tokio::task::spawn_local(async move {
            while let Some(line) = queue.recv().await {
                let mut out = output.borrow_mut();
                let _ = out.writer().write_all(line.as_bytes());
                while let Ok(line) = queue.try_recv() {
                    let _ = out.writer().write_all(line.as_bytes());
                }
                let _ = out.writer().flush();
            }
        }));
    }
    let reopen = output.clone();
    tokio::task::spawn_local(async move {
        let Ok(mut usr1) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined1())
        else {
            return;
        };
        while usr1.recv().await.is_some() {
            reopen.borrow_mut().reopen();
        }
    });
    for drain in drains {
        let _ = drain.await;
    }
    let _ = output.borrow_mut().writer().flush();
}

//! `ldap-repl-lag`: replication lag under a sustained write load (issue #13). A writer
//! modifies entries on the provider at a fixed rate, one request at a time, each setting
//! `description` to `lag <n>`; every `sample_every`-th write is a sample. A poller on the
//! consumer reads each sample's entry with a base search until it shows that write (or a
//! later one of the same entry), and records the time from the provider's acknowledgement to
//! the first read that shows it. Replication applies changes in order, so the poller takes
//! the samples one after the other.
//!
//! What it measures is the lag a client sees: provider commit, the provider's persist
//! send, the consumer's apply and commit, plus at most one poll's round trip (a base search
//! on loopback, tens of microseconds). Both servers are read and written as the rootDN (or
//! whoever `bind_dn` names) so that limits and access rules play no part.

use std::time::{Duration, Instant};

use ferrodir_proto::filter::Filter;
use ferrodir_proto::message::{
    decode_message, AuthenticationChoice, BindRequest, Change, DerefAliases, LdapMessage, ModifyOperation,
    ModifyRequest, OctetString, PartialAttribute, ProtocolOp, SearchRequest, SearchScope,
};
use hdrhistogram::Histogram;
use tokio::sync::mpsc;
use tokio::time::{sleep, sleep_until, timeout};

use crate::conn::Conn;
use crate::error::Error;
use crate::template::Template;

const SETUP_TIMEOUT: Duration = Duration::from_secs(10);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// Lags above an hour are recorded as an hour.
const LAG_US_MAX: u64 = 3_600_000_000;
/// Samples waiting for the poller; the writer blocks beyond that (it never drops one).
const SAMPLES_QUEUED_MAX: usize = 1 << 16;
/// The longest run the tool accepts: it is a load test and must stop by itself.
pub const DURATION_MAX: Duration = Duration::from_secs(600);

pub struct Config {
    /// host:port of the provider (written to).
    pub provider: String,
    /// host:port of the consumer (read from).
    pub consumer: String,
    pub bind_dn: String,
    pub password: String,
    /// Entry n's DN; writes go to entries `first`, `first + 1`, ... in turn.
    pub dn: Template,
    pub first: u64,
    /// How many distinct entries the writes go round.
    pub entries: u64,
    /// Writes per second the writer aims at.
    pub rate: f64,
    pub duration: Duration,
    pub sample_every: u64,
    /// After the writer stops: how long the poller may still wait for a sample to appear.
    pub catch_up: Duration,
}

pub struct Report {
    pub writes: u64,
    pub seconds: f64,
    pub samples: u64,
    /// Samples that never showed on the consumer within `catch_up`.
    pub missing: u64,
    pub lag_us: Histogram<u64>,
    pub write_errors: u64,
}

impl Report {
    pub fn to_json(&self) -> String {
        let q = |quantile: f64| {
            if self.lag_us.is_empty() {
                0.0
            } else {
                self.lag_us.value_at_quantile(quantile) as f64 / 1000.0
            }
        };
        format!(
            "{{\"writes\":{},\"seconds\":{:.3},\"writes_per_s\":{:.1},\"samples\":{},\"missing\":{},\
             \"lag_p50_ms\":{:.3},\"lag_p99_ms\":{:.3},\"lag_max_ms\":{:.3},\"write_errors\":{}}}",
            self.writes,
            self.seconds,
            self.writes as f64 / self.seconds.max(1e-9),
            self.samples,
            self.missing,
            q(0.5),
            q(0.99),
            if self.lag_us.is_empty() { 0.0 } else { self.lag_us.max() as f64 / 1000.0 },
            self.write_errors
        )
    }
}

/// One connection, one request at a time.
struct Connection {
    conn: Conn,
}

impl Connection {
    async fn open(address: &str, bind_dn: &str, password: &str) -> Result<Connection, Error> {
        let mut connection = Connection { conn: Conn::connect(address, SETUP_TIMEOUT).await? };
        let bind = ProtocolOp::BindRequest(BindRequest {
            version: 3,
            name: OctetString::from(bind_dn.as_bytes().to_vec()),
            authentication: AuthenticationChoice::Simple(OctetString::from(password.as_bytes().to_vec())),
        });
        let (code, _) = connection.exchange(bind).await?;
        if code != 0 {
            return Err(Error::Unexpected(format!("bind as {bind_dn} to {address}: resultCode {code}")));
        }
        Ok(connection)
    }

    async fn next_message(&mut self) -> Result<LdapMessage, Error> {
        let len = self.conn.read_frame(None).await?;
        let message = decode_message(self.conn.frame(len))
            .map_err(|e| Error::Unexpected(format!("undecodable message: {}", e.reason)))?;
        self.conn.consume(len);
        Ok(message)
    }

    /// Sends one request and reads up to its final response: the result code, and the
    /// values of the first attribute of the last entry returned (searches only).
    async fn exchange(&mut self, protocol_op: ProtocolOp) -> Result<(u32, Vec<Vec<u8>>), Error> {
        let id = self.conn.send(protocol_op, None).await?;
        let mut values = Vec::new();
        let read = async {
            loop {
                let message = self.next_message().await?;
                if message.message_id == 0 {
                    return Err(Error::Unexpected("Notice of Disconnection".into()));
                }
                if message.message_id != id {
                    continue;
                }
                match message.protocol_op {
                    ProtocolOp::SearchResultEntry(entry) => {
                        values = entry
                            .attributes
                            .into_iter()
                            .next()
                            .map(|a| a.vals.into_iter().map(|v| v.to_vec()).collect())
                            .unwrap_or_default();
                    }
                    ProtocolOp::SearchResultReference(_) | ProtocolOp::IntermediateResponse(_) => {}
                    ProtocolOp::BindResponse(r) => return Ok(r.result.result_code.0),
                    ProtocolOp::ModifyResponse(r) | ProtocolOp::SearchResultDone(r) => {
                        return Ok(r.result_code.0)
                    }
                    other => return Err(Error::Unexpected(format!("answer {other:?}"))),
                }
            }
        };
        let code = timeout(REQUEST_TIMEOUT, read)
            .await
            .map_err(|_| Error::Timeout(REQUEST_TIMEOUT.as_millis() as u64))??;
        Ok((code, values))
    }
}

fn modify(dn: &str, value: &str) -> ProtocolOp {
    ProtocolOp::ModifyRequest(ModifyRequest {
        object: OctetString::from(dn.as_bytes().to_vec()),
        changes: vec![Change {
            operation: ModifyOperation::Replace,
            modification: PartialAttribute {
                r#type: OctetString::from_static(b"description"),
                vals: vec![OctetString::from(value.as_bytes().to_vec())],
            },
        }],
    })
}

fn read_description(dn: &str) -> ProtocolOp {
    ProtocolOp::SearchRequest(SearchRequest {
        base_object: OctetString::from(dn.as_bytes().to_vec()),
        scope: SearchScope::BaseObject,
        deref_aliases: DerefAliases::NeverDerefAliases,
        size_limit: 0,
        time_limit: 0,
        types_only: false,
        filter: Filter::Present(OctetString::from_static(b"objectClass")),
        attributes: vec![OctetString::from_static(b"description")],
    })
}

/// The write number a `description` value shows, if it is one of ours.
fn write_number(values: &[Vec<u8>]) -> Option<u64> {
    values.iter().filter_map(|v| std::str::from_utf8(v).ok()?.strip_prefix("lag ")?.parse().ok()).max()
}

struct Sample {
    number: u64,
    dn: String,
    acknowledged: Instant,
}

pub async fn run(config: &Config) -> Result<Report, Error> {
    if config.duration > DURATION_MAX || config.rate <= 0.0 || config.entries == 0 || config.sample_every == 0
    {
        return Err(Error::Config(
            "need 0 < duration <= 600 s, rate > 0, entries > 0, sample_every > 0".into(),
        ));
    }
    let mut writer = Connection::open(&config.provider, &config.bind_dn, &config.password).await?;
    let mut reader = Connection::open(&config.consumer, &config.bind_dn, &config.password).await?;
    let (samples_tx, mut samples_rx) = mpsc::channel::<Sample>(SAMPLES_QUEUED_MAX);

    let poll = async move {
        let mut lag_us =
            Histogram::<u64>::new_with_bounds(1, LAG_US_MAX, 3).map_err(|e| Error::Config(e.to_string()))?;
        let (mut samples, mut missing) = (0u64, 0u64);
        let mut writer_done_at: Option<Instant> = None;
        while let Some(sample) = samples_rx.recv().await {
            samples += 1;
            loop {
                let (code, values) = reader.exchange(read_description(&sample.dn)).await?;
                if code == 0 && write_number(&values).is_some_and(|n| n >= sample.number) {
                    let lag = sample.acknowledged.elapsed().as_micros() as u64;
                    lag_us.saturating_record(lag.clamp(1, LAG_US_MAX));
                    break;
                }
                if samples_rx.is_closed() {
                    // The writer has stopped: what has not shown by now gets `catch_up` more.
                    let done = *writer_done_at.get_or_insert_with(Instant::now);
                    if done.elapsed() > config.catch_up {
                        missing += 1;
                        break;
                    }
                }
                sleep(Duration::from_micros(200)).await;
            }
        }
        Ok::<_, Error>((lag_us, samples, missing))
    };

    let write = async move {
        let interval = Duration::from_secs_f64(1.0 / config.rate);
        let start = Instant::now();
        let (mut writes, mut errors) = (0u64, 0u64);
        let mut next = tokio::time::Instant::now();
        let mut dn = String::new();
        while start.elapsed() < config.duration {
            sleep_until(next).await;
            next += interval;
            dn.clear();
            config.dn.render_into(config.first + writes % config.entries, &mut dn);
            let number = writes;
            let (code, _) = writer.exchange(modify(&dn, &format!("lag {number}"))).await?;
            writes += 1;
            if code != 0 {
                errors += 1;
                continue;
            }
            if number % config.sample_every == 0 {
                let sample = Sample { number, dn: dn.clone(), acknowledged: Instant::now() };
                if samples_tx.send(sample).await.is_err() {
                    break;
                }
            }
        }
        Ok::<_, Error>((writes, start.elapsed().as_secs_f64(), errors))
    };

    let (written, polled) = tokio::join!(write, poll);
    let (writes, seconds, write_errors) = written?;
    let (lag_us, samples, missing) = polled?;
    Ok(Report { writes, seconds, samples, missing, lag_us, write_errors })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_numbers_are_read_from_our_values_only() {
        assert_eq!(write_number(&[b"lag 17".to_vec()]), Some(17));
        assert_eq!(write_number(&[b"initial".to_vec(), b"lag 3".to_vec(), b"lag 9".to_vec()]), Some(9));
        assert_eq!(write_number(&[b"lagging".to_vec()]), None);
        assert_eq!(write_number(&[]), None);
    }
}

//! The peers (Powertools for AWS Lambda, Python and TypeScript) as long-lived processes fed one
//! event at a time, timed in bursts.
use crate::*;

/// The median of a burst of timed runs of one of a peer's modes.
#[derive(Deserialize)]
pub(crate) struct PeerResult {
    pub(crate) name: String,
    pub(crate) ms: f64,
    pub(crate) failures: usize,
}

/// A peer's script, running: for each number written to it, that many timed runs of each of its
/// modes, back to back.
pub(crate) struct Peer {
    pub(crate) script: PathBuf,
    pub(crate) child: Child,
    pub(crate) runs: Option<ChildStdin>,
    pub(crate) results: BufReader<ChildStdout>,
}

impl Peer {
    pub(crate) fn spawn(program: &Path, script: &Path, args: &[&OsStr]) -> Result<Self, String> {
        let mut child = Command::new(program)
            .arg(script)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("{}: {e}", program.display()))?;
        let (Some(runs), Some(results)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(format!("{}: no pipes to the peer", script.display()));
        };
        Ok(Peer {
            script: script.to_owned(),
            child,
            runs: Some(runs),
            results: BufReader::new(results),
        })
    }

    /// `PEER_BURST` runs of each mode, back to back; each mode's median. An error when the peer
    /// fails or disagrees on the failures.
    pub(crate) fn run(&mut self, expected_failures: usize) -> Result<Vec<PeerResult>, String> {
        self.burst(PEER_BURST, expected_failures)
    }

    /// [`Peer::run`] with `burst` runs of each mode.
    pub(crate) fn burst(
        &mut self,
        burst: usize,
        expected_failures: usize,
    ) -> Result<Vec<PeerResult>, String> {
        let failed = |e: &dyn std::fmt::Display| format!("{}: {e}", self.script.display());
        let runs = self.runs.as_mut().ok_or_else(|| failed(&"closed"))?;
        writeln!(runs, "{burst}")
            .and_then(|()| runs.flush())
            .map_err(|e| failed(&e))?;
        let mut line = String::new();
        match self.results.read_line(&mut line) {
            Ok(0) => return Err(failed(&"exited (its error is above)")),
            Ok(_) => {}
            Err(e) => return Err(failed(&e)),
        }
        let results: Vec<PeerResult> =
            serde_json::from_str(&line).map_err(|e| failed(&format!("unreadable result: {e}")))?;
        match results
            .iter()
            .find(|mode| mode.failures != expected_failures)
        {
            Some(mode) => Err(format!(
                "{} reported {} failures, expected {expected_failures}",
                mode.name, mode.failures
            )),
            None if results.is_empty() => Err(failed(&"no result")),
            None => Ok(results),
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.runs = None; // end of input: the script returns
        let _ = self.child.wait();
    }
}

/// A peer's runs, mode by mode, and each run's ratio to the turns of ours around it.
#[derive(Default)]
pub(crate) struct PeerSamples {
    pub(crate) names: Vec<String>,
    pub(crate) ms: Vec<Vec<f64>>,
    pub(crate) ratios: Vec<Vec<f64>>,
}

impl PeerSamples {
    pub(crate) fn add(&mut self, results: Vec<PeerResult>, ours_ms: f64) {
        if self.names.is_empty() {
            self.names = results.iter().map(|mode| mode.name.clone()).collect();
            self.ms = vec![Vec::new(); results.len()];
            self.ratios = vec![Vec::new(); results.len()];
        }
        for (mode, result) in results.into_iter().enumerate() {
            self.ms[mode].push(result.ms);
            self.ratios[mode].push(result.ms / ours_ms);
        }
    }

    /// Each mode's name, median time and median ratio.
    pub(crate) fn modes(&self) -> Vec<(String, f64, f64)> {
        (0..self.names.len())
            .map(|mode| {
                (
                    self.names[mode].clone(),
                    median(self.ms[mode].clone()),
                    median(self.ratios[mode].clone()),
                )
            })
            .collect()
    }

    /// The mode with the lowest median time.
    pub(crate) fn fastest(&self) -> (String, f64, f64) {
        self.modes()
            .into_iter()
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .expect("a peer reports at least one mode")
    }
}

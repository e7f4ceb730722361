//! Who scrapes `/metrics`, and how often: a new per-pod counter series is
//! served at 0 until every regular scraper has had a chance to read it, so
//! that `increase()` counts its first event whatever the scrape interval
//! (see `pod_series`). Scrapers are told apart by address (Prometheus' HA
//! replicas by theirs); each one's last interval is what it will wait
//! before its next scrape.

use std::{
    collections::HashMap,
    net::IpAddr,
    time::{Duration, Instant},
};

/// A scraper not seen for this long has gone.
const FORGET: Duration = Duration::from_secs(600);
/// An interval longer than this is no scraper's (a person's curl now and
/// then): it sets no hold.
pub const LONGEST: Duration = Duration::from_secs(300);
/// Addresses kept; the least recently seen goes for a new one.
const MAX_SCRAPERS: usize = 64;

#[derive(Debug, Clone, Copy)]
struct Seen {
    last: Instant,
    interval: Option<Duration>,
}

#[derive(Debug, Default)]
pub struct Scrapers {
    seen: HashMap<IpAddr, Seen>,
}

impl Scrapers {
    /// A scrape from `ip` at `now`.
    pub fn scraped(&mut self, ip: IpAddr, now: Instant) {
        if let Some(seen) = self.seen.get_mut(&ip) {
            seen.interval = Some(now.saturating_duration_since(seen.last));
            seen.last = now;
            return;
        }
        self.seen.retain(|_, s| now.saturating_duration_since(s.last) < FORGET);
        if self.seen.len() >= MAX_SCRAPERS {
            let oldest = self.seen.iter().min_by_key(|(_, s)| s.last).map(|(ip, _)| *ip);
            if let Some(oldest) = oldest {
                self.seen.remove(&oldest);
            }
        }
        self.seen.insert(ip, Seen { last: now, interval: None });
    }

    /// The longest interval, up to [`LONGEST`], of the scrapers seen in the
    /// last 10 minutes; `None` before any scraper's second scrape.
    pub fn longest_interval(&self, now: Instant) -> Option<Duration> {
        self.seen
            .values()
            .filter(|s| now.saturating_duration_since(s.last) < FORGET)
            .filter_map(|s| s.interval)
            .filter(|i| *i <= LONGEST)
            .max()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1));
    const B: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 2));

    /// Guards: HA replicas' scrapes interleaved read as one scraper's
    /// halved interval; a curl an hour later setting an hour's hold; a
    /// scraper gone long ago still setting it.
    #[test]
    fn each_scraper_keeps_its_own_interval_and_only_regular_ones_count() {
        let t = Instant::now();
        let s = |secs: u64| t + Duration::from_secs(secs);
        let mut scrapers = Scrapers::default();
        assert_eq!(scrapers.longest_interval(t), None);
        for i in 0..4 {
            scrapers.scraped(A, s(60 * i));
            scrapers.scraped(B, s(60 * i + 30));
        }
        assert_eq!(scrapers.longest_interval(s(200)), Some(Duration::from_secs(60)), "each replica's 60 s");
        // Someone's curl, then again an hour later: no scraper's interval.
        scrapers.scraped(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), s(200));
        scrapers.scraped(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), s(3800));
        assert_eq!(scrapers.longest_interval(s(3800)), None, "the replicas are gone, the curl is no scraper");
    }

    /// Guards: a flood of addresses growing the table without bound.
    #[test]
    fn the_table_keeps_at_most_its_cap() {
        let t = Instant::now();
        let mut scrapers = Scrapers::default();
        for i in 0..1000u32 {
            scrapers.scraped(IpAddr::V4(i.into()), t + Duration::from_millis(u64::from(i)));
        }
        assert_eq!(scrapers.seen.len(), MAX_SCRAPERS);
    }
}

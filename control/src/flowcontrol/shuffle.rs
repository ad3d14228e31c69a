//! Shuffle sharding: a flow's hash deals it a hand of queues out of a deck, the same hand
//! every time, so that a heavy flow crowds only its own few queues (kube's
//! `shufflesharding.Dealer`: the hash read as a mixed-radix number, one digit per card).

/// Deals hands of `hand` cards out of a deck of `deck`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dealer {
    deck: usize,
    hand: usize,
}

impl Dealer {
    /// A dealer for a deck and hand that shuffle sharding allows (kube's limits: both
    /// positive, the hand no larger than the deck, at most 60 bits of hash used).
    pub fn new(deck: usize, hand: usize) -> Option<Dealer> {
        let ok = deck > 0
            && hand > 0
            && hand <= deck
            && deck <= 1 << 26
            && api::flowcontrol::required_entropy_bits(deck as i32, hand as i32)
                <= api::flowcontrol::MAX_HASH_BITS;
        ok.then_some(Dealer { deck, hand })
    }

    /// The hand `hash` deals: distinct cards of `0..deck`, in dealing order. Each card is
    /// a digit of the hash in a falling base (deck, deck-1, ...), counted among the cards
    /// not dealt yet.
    pub fn deal(&self, mut hash: u64) -> Vec<usize> {
        let mut digits = Vec::with_capacity(self.hand);
        for i in 0..self.hand {
            let base = (self.deck - i) as u64;
            digits.push((hash % base) as usize);
            hash /= base;
        }
        let mut hand: Vec<usize> = Vec::with_capacity(self.hand);
        for (i, digit) in digits.iter().enumerate() {
            // The digit-th card among those left: skip the cards already dealt at or below.
            let mut card = *digit;
            for earlier in digits[..i].iter().rev() {
                if card >= *earlier {
                    card += 1;
                }
            }
            hand.push(card);
        }
        hand
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hands_are_distinct_cards_of_the_deck() {
        let dealer = Dealer::new(128, 6).expect("dealer");
        for hash in [0u64, 1, 42, u64::MAX, 0x0123_4567_89ab_cdef] {
            let hand = dealer.deal(hash);
            assert_eq!(hand.len(), 6);
            assert!(hand.iter().all(|c| *c < 128));
            let mut sorted = hand.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(sorted.len(), 6, "{hand:?}");
            assert_eq!(dealer.deal(hash), hand, "the same hash deals the same hand");
        }
        // The first card is the hash modulo the deck; then the falling bases.
        assert_eq!(Dealer::new(10, 3).expect("dealer").deal(0), [0, 1, 2]);
        assert_eq!(Dealer::new(10, 3).expect("dealer").deal(7), [7, 0, 1]);
        assert_eq!(Dealer::new(10, 2).expect("dealer").deal(8 * 10), [0, 9]);
    }

    #[test]
    fn hands_spread_over_the_deck() {
        let dealer = Dealer::new(64, 8).expect("dealer");
        let mut seen = vec![0u32; 64];
        for i in 0..2000u64 {
            for c in dealer.deal(i.wrapping_mul(0x9e37_79b9_7f4a_7c15)) {
                seen[c] += 1;
            }
        }
        assert!(seen.iter().all(|n| *n > 150), "{seen:?}");
    }

    #[test]
    fn kube_limits() {
        assert!(Dealer::new(0, 1).is_none());
        assert!(Dealer::new(4, 5).is_none());
        assert!(Dealer::new(512, 8).is_none(), "72 bits of entropy");
        assert!(Dealer::new(128, 8).is_some());
    }
}

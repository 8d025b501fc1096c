//! `plain-relay`: the ngit suite's plain NIP-01 user relay (`grasp_tests::plain_relay`) on its
//! own, for trying ngit by hand against a GRASP server the way the suite does. Prints its URL and
//! serves until killed.

fn main() {
    let relay = grasp_tests::plain_relay::PlainRelay::start();
    println!("{}", relay.url());
    loop {
        std::thread::park();
    }
}

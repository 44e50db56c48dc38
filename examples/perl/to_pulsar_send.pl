#!/usr/bin/env perl
# to_pulsar_send.pl SOCKET TOPIC VALUE [KEY] [PARTITION_KEY]: one message, timestamp now.
# An empty KEY means no key; an empty SOCKET means $TO_PULSAR_SOCKET, else the default.
# Exit 0 on success, 1 when the send fails, 2 for bad arguments.
use strict;
use warnings;
use FindBin ();
use lib $FindBin::RealBin;
use ToPulsar;

if (@ARGV < 3 || @ARGV > 5) {
    print STDERR "usage: to_pulsar_send.pl SOCKET TOPIC VALUE [KEY] [PARTITION_KEY]\n";
    exit 2;
}
my ($socket_path, $topic, $value, $key, $partition_key) = @ARGV;

my $stage = 'args';
my $ok = eval {
    # Encode first: a bad message is an argument error, whether or not a daemon is there.
    my $datagram = defined $partition_key
        ? ToPulsar::encode_partition_key(
            $partition_key, $topic, $value, $key, ToPulsar::now_ms())
        : ToPulsar::encode_any_partition($topic, $value, $key, ToPulsar::now_ms());
    $stage = 'send';
    my $tp = ToPulsar->new($socket_path);
    $tp->send_raw($datagram);
    $tp->close;
    1;
};
unless ($ok) {
    my $msg = $@;
    $msg =~ s/\AToPulsar: //;
    print STDERR "to_pulsar_send.pl: error: $msg";
    exit($stage eq 'args' ? 2 : 1);
}
exit 0;

package ToPulsar;

# Send Bruce-format messages to the local pulsar-bruce daemon (core Perl only).
#
#     use ToPulsar;
#     my $tp = ToPulsar->new('/run/pulsar-bruce/bruce.sock');
#     $tp->send_any('clicks', '{"user":42}', 'user-42');
#     $tp->send_keyed(42, 'clicks', '{"user":42}', 'user-42', 1700000000000);
#
# Every error dies with one line starting "ToPulsar: ". Strings with Perl's UTF-8
# flag on (wide characters, decoded input) are sent UTF-8 encoded, other strings
# byte for byte; to be sure, pass bytes (Encode::encode_utf8($text)).

use strict;
use warnings;

use Encode ();
use Errno qw(EAGAIN EWOULDBLOCK EMSGSIZE ENOENT ECONNREFUSED ENOTCONN EINTR);
use Socket qw(AF_UNIX SOCK_DGRAM SOL_SOCKET SO_SNDTIMEO pack_sockaddr_un);
use Time::HiRes ();

our $VERSION = '0.1';

use constant {
    DEFAULT_SOCKET           => '/run/pulsar-bruce/bruce.sock',
    API_KEY_ANY_PARTITION    => 256,
    API_KEY_PARTITION_KEY    => 257,
    ANY_PARTITION_OVERHEAD   => 28,
    PARTITION_KEY_OVERHEAD   => 32,
    MAX_TOPIC_SIZE           => 0x7FFF,
};

# new($socket_path, timeout => $seconds): connects now, so a missing daemon is
# reported early. $socket_path defaults to $ENV{TO_PULSAR_SOCKET}, else the
# packaged default. timeout: how long a send waits for room in the daemon's
# queue (default 5; 0 = never wait; undef = forever).
sub new {
    my ($class, $socket_path, %opt) = @_;
    $socket_path = $ENV{TO_PULSAR_SOCKET} if !defined $socket_path || $socket_path eq '';
    $socket_path = DEFAULT_SOCKET if !defined $socket_path || $socket_path eq '';
    my $timeout = exists $opt{timeout} ? $opt{timeout} : 5;
    die "ToPulsar: timeout must be >= 0 or undef\n" if defined $timeout && !($timeout >= 0);
    my $self = bless { path => $socket_path, timeout => $timeout, sock => undef }, $class;
    $self->{sock} = $self->_connect;
    return $self;
}

sub socket_path { $_[0]{path} }

# Topic bytes -> an AnyPartition message's head (ApiKey ApiVersion Flags TopicSize
# Topic), for send_any's usual case; a bad topic dies as on the general path.
my %any_head;

# send_any($topic, $value, $key, $timestamp_ms): AnyPartition, the daemon picks the
# partition. $key undef or '' = no key; $timestamp_ms undef = now, 0 = no event time.
sub send_any {
    my ($self, $topic, $value, $key, $timestamp_ms) = @_;
    # The usual message (byte strings, no key, the time now) is one pack here, with the
    # topic's head built and checked once: the general path's ten sub calls and regular
    # expressions were three quarters of a send's cost.
    if ((!defined $key || $key eq '') && !defined $timestamp_ms && defined $value
        && defined $topic && !utf8::is_utf8($value) && !utf8::is_utf8($topic)) {
        my $head = $any_head{$topic} // _any_head($topic);
        my $size = ANY_PARTITION_OVERHEAD + length($topic) + length($value);
        if ($size <= 0x7FFFFFFF) {
            my $datagram = pack('l> a* q> l> l>/a', $size, $head,
                int(Time::HiRes::time() * 1000), 0, $value);
            my $sock = $self->{sock};
            return 1 if $sock && defined send($sock, $datagram, 0);
            $self->send_raw($datagram);    # EINTR, a restarted daemon, or the error
            return 1;
        }
    }
    $self->send_raw(encode_any_partition($topic, $value, $key, _timestamp($timestamp_ms)));
    return 1;
}

# A bad topic dies here as on the general path.
sub _any_head {
    my ($topic) = @_;
    _fields($topic, '', '');
    %any_head = () if keys %any_head >= 4096;
    return $any_head{$topic} = pack('s> s> s> s>/a', API_KEY_ANY_PARTITION, 0, 0, $topic);
}

# send_keyed($partition_key, $topic, $value, $key, $timestamp_ms): PartitionKey, the
# daemon routes to partition $partition_key % partitions (uint32; negative int32
# values map to the same key by two's complement).
sub send_keyed {
    my ($self, $partition_key, $topic, $value, $key, $timestamp_ms) = @_;
    $self->send_raw(
        encode_partition_key($partition_key, $topic, $value, $key, _timestamp($timestamp_ms)));
    return 1;
}

# send_raw($datagram): one already encoded datagram. Reconnects once if the daemon
# restarted.
sub send_raw {
    my ($self, $datagram) = @_;
    die "ToPulsar: sender is closed\n" unless $self->{sock};
    return 1 if _send($self->{sock}, $datagram);
    my $err = $! + 0;
    if ($err == ENOENT || $err == ECONNREFUSED || $err == ENOTCONN) {
        my $new = $self->_connect;    # dies if the daemon is still not there
        CORE::close($self->{sock});
        $self->{sock} = $new;
        return 1 if _send($new, $datagram);
        $err = $! + 0;
    }
    die $self->_error($err, length $datagram);
}

sub close {
    my ($self) = @_;
    CORE::close($self->{sock}) if $self->{sock};
    $self->{sock} = undef;
    return;
}

sub DESTROY { $_[0]->close }

# -- encoding --------------------------------------------------------------------------

sub encode_any_partition {
    my ($topic, $value, $key, $timestamp_ms) = @_;
    ($topic, $value, $key) = _fields($topic, $value, $key);
    my $size = ANY_PARTITION_OVERHEAD + length($topic) + length($key) + length($value);
    _check_size($size);
    return pack('l> s> s> s> s>/a q> l>/a l>/a',
        $size, API_KEY_ANY_PARTITION, 0, 0, $topic, _int64($timestamp_ms), $key, $value);
}

sub encode_partition_key {
    my ($partition_key, $topic, $value, $key, $timestamp_ms) = @_;
    die "ToPulsar: partition key must be an integer in -2147483648..4294967295\n"
        unless defined $partition_key && $partition_key =~ /\A-?[0-9]+\z/
        && $partition_key >= -2147483648 && $partition_key <= 4294967295;
    ($topic, $value, $key) = _fields($topic, $value, $key);
    my $size = PARTITION_KEY_OVERHEAD + length($topic) + length($key) + length($value);
    _check_size($size);
    return pack('l> s> s> s> L> s>/a q> l>/a l>/a',
        $size, API_KEY_PARTITION_KEY, 0, 0, $partition_key < 0 ? $partition_key + 2**32
        : $partition_key, $topic, _int64($timestamp_ms), $key, $value);
}

# -- internals -------------------------------------------------------------------------

sub _bytes {
    my ($s) = @_;
    $s = '' unless defined $s;
    utf8::encode($s) if utf8::is_utf8($s);
    return $s;
}

sub _fields {
    my ($topic, $value, $key) = map { _bytes($_) } @_;
    my $len = length $topic;
    die "ToPulsar: topic must be 1.." . MAX_TOPIC_SIZE . " bytes, got $len bytes\n"
        unless $len > 0 && $len <= MAX_TOPIC_SIZE;
    check_topic($topic);
    return ($topic, $value, $key);
}

# check_topic($bytes): dies unless the daemon accepts the name (its own rule, as
# to_pulsar.topics): t, tenant/namespace/t, or persistent:// (non-persistent://) and
# tenant/namespace/t; tenant and namespace ASCII letters, digits and - = : . _; the
# topic's own name UTF-8 without '/', whitespace or control characters. Names found
# valid are remembered, so the per-message check is one hash lookup.
my %valid_topic;
my $LOCAL_NAME = qr{\A[^/\x00-\x20\x7f-\xa0\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}]+\z};
my $NAMED_ENTITY = qr{\A[-=:.A-Za-z0-9_]+\z};

sub check_topic {
    my ($raw) = @_;
    return if exists $valid_topic{$raw};
    my $name = eval { Encode::decode('UTF-8', my $copy = $raw, Encode::FB_CROAK()) };
    die "ToPulsar: topic '$raw' is not UTF-8\n" unless defined $name;
    my $forms = 't, tenant/namespace/t or persistent://tenant/namespace/t';
    my $qualified = index($name, '://') >= 0;
    if ($qualified) {
        my ($domain, $rest) = split m{://}, $name, 2;
        die "ToPulsar: invalid topic '$raw': the domain must be persistent or non-persistent\n"
            unless $domain eq 'persistent' || $domain eq 'non-persistent';
        $name = $rest;
    }
    my @parts = split m{/}, $name, -1;
    my ($tenant, $namespace, $local);
    if (@parts == 3) {
        ($tenant, $namespace, $local) = @parts;
    } elsif (@parts == 1 && !$qualified) {
        ($tenant, $namespace, $local) = ('public', 'default', $parts[0]);
    } else {
        die "ToPulsar: invalid topic '$raw': expected $forms\n";
    }
    for ([tenant => $tenant], [namespace => $namespace]) {
        die "ToPulsar: invalid topic '$raw': the $_->[0] must be ASCII letters, digits "
            . "and - = : . _ only\n" unless $_->[1] =~ $NAMED_ENTITY;
    }
    die "ToPulsar: invalid topic '$raw': the topic's own name must be non-empty, "
        . "without whitespace or control characters\n" unless $local =~ $LOCAL_NAME;
    %valid_topic = () if keys %valid_topic >= 4096;
    $valid_topic{$raw} = 1;
}

sub _check_size {
    my ($size) = @_;
    die "ToPulsar: message of $size bytes exceeds the int32 Size field\n" if $size > 0x7FFFFFFF;
}

sub _int64 {
    my ($ts) = @_;
    die "ToPulsar: timestamp_ms must be an integer (ms since the epoch)\n"
        unless $ts =~ /\A-?[0-9]+\z/;
    return $ts;
}

sub _timestamp {
    my ($ts) = @_;
    return defined $ts ? $ts : now_ms();
}

# Milliseconds since the epoch.
sub now_ms { int(Time::HiRes::time() * 1000) }

sub _send {
    my ($sock, $datagram) = @_;
    while (1) {
        my $sent = send($sock, $datagram, 0);
        return 1 if defined $sent;
        return 0 unless $! == EINTR;
    }
}

sub _connect {
    my ($self) = @_;
    my $path = $self->{path};
    socket(my $sock, AF_UNIX, SOCK_DGRAM, 0) or die "ToPulsar: cannot create a socket: $!\n";
    unless (connect($sock, pack_sockaddr_un($path))) {
        my $err = $! + 0;
        local $! = $err;
        die "ToPulsar: no daemon listening on $path ($!)\n"
            if $err == ENOENT || $err == ECONNREFUSED;
        die "ToPulsar: cannot connect to daemon socket $path ($!)\n";
    }
    my $timeout = $self->{timeout};
    if (defined $timeout && $timeout == 0) {
        require IO::Handle;
        $sock->blocking(0);
    }
    elsif (defined $timeout) {
        my $usec = int($timeout * 1_000_000 + 0.5) || 1;
        setsockopt($sock, SOL_SOCKET, SO_SNDTIMEO,
            pack('l! l!', int($usec / 1_000_000), $usec % 1_000_000))
            or die "ToPulsar: cannot set the send timeout: $!\n";
    }
    return $sock;
}

sub _error {
    my ($self, $err, $size) = @_;
    my $path = $self->{path};
    local $! = $err;
    if ($err == EAGAIN || $err == EWOULDBLOCK) {
        return "ToPulsar: daemon socket $path queue is full (timeout=0)\n"
            if defined $self->{timeout} && $self->{timeout} == 0;
        return "ToPulsar: daemon socket $path queue stayed full for longer than the "
            . "$self->{timeout}s timeout\n";
    }
    return "ToPulsar: message of $size bytes is too large to send ($!)\n" if $err == EMSGSIZE;
    return "ToPulsar: no daemon listening on $path ($!)\n"
        if $err == ENOENT || $err == ECONNREFUSED || $err == ENOTCONN;
    return "ToPulsar: send to $path failed ($!)\n";
}

1;

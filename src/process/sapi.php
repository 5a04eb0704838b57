<?php
// fpmd's part of php-fpm's SAPI for stock php-cgi, run before each script
// as auto_prepend_file (fpmd's src/proxy/sapi/mod.rs says how it is used).
//
// It talks to fpmd in-band: each message is one line on the request's
// FastCGI STDERR stream, "\x1b[fpmd TOKEN VERB ARGS]", TOKEN being the
// random hex string fpmd gave this request as its FPMD_SAPI parameter.
// fpmd removes the lines that carry the request's token before anything
// reaches the web server; any other line (a script printing these bytes
// itself) goes through as the text it is.
//
// No variable is left in the global scope: the pool's own
// auto_prepend_file, included at the end, runs as it would under php-fpm.

namespace Fpmd {
    final class Sapi
    {
        /** @var string|null this request's token, null without fpmd */
        private static $token = null;
        /** @var bool fastcgi_finish_request() was called */
        private static $finished = false;
        /** @var int bytes the script printed after fastcgi_finish_request() */
        private static $after = 0;
        /** @var int[]|null CPU µs (user, system) when the request started */
        private static $rusage = null;

        /** The request starts: its token, CPU times and end report. */
        public static function start(): bool
        {
            $token = \getenv('FPMD_SAPI');
            if (!\is_string($token) || \strlen($token) !== 32) {
                return false;
            }
            self::$token = $token;
            self::$finished = false;
            self::$after = 0;
            self::$rusage = self::cpu();
            if (\function_exists('register_shutdown_function')) {
                // The first shutdown function: php-fpm's error header goes
                // before the script's own ones run, as php-fpm sets it
                // before php_request_shutdown(); the report, registered
                // from there, runs after every other one.
                \register_shutdown_function([self::class, 'last']);
            }
            return true;
        }

        /** The first shutdown function: the error header, then the report last. */
        public static function last(): void
        {
            self::errorHeader();
            \register_shutdown_function([self::class, 'end']);
        }

        /**
         * php-fpm's fastcgi.error_header (fpm_main.c, after the script):
         * when the script ended with exit status 255 and the head is not
         * sent yet, that header line replaces what the script set (e.g.
         * "HTTP/1.1 500 PHP Error": the status). php-cgi has no such ini
         * entry; its value (php.ini, -d, php_admin_value) is read from
         * PHP's configuration. Exit status 255 is a fatal error (also an
         * uncaught exception or a timeout), the one PHP records last; an
         * explicit exit(255) cannot be told from PHP.
         */
        public static function errorHeader(): void
        {
            $line = \get_cfg_var('fastcgi.error_header');
            if (!\is_string($line) || $line === '' || !\function_exists('header') || \headers_sent()) {
                return;
            }
            $fatal = \E_ERROR | \E_CORE_ERROR | \E_COMPILE_ERROR | \E_USER_ERROR
                | \E_RECOVERABLE_ERROR | \E_PARSE;
            $e = \error_get_last();
            if ($e !== null && ($e['type'] & $fatal) !== 0) {
                \header($line);
            }
        }

        /**
         * User and system CPU µs of this process and of the children it
         * waited for, as php-fpm reads them: times(), in clock ticks
         * (USER_HZ, 100 a second on Linux), tms_utime + tms_cutime and
         * tms_stime + tms_cstime (fpm_request.c). One call; getrusage()
         * (two) where posix is not loaded.
         */
        private static function cpu(): ?array
        {
            if (\function_exists('posix_times')) {
                $t = \posix_times();
                return [
                    ($t['utime'] + $t['cutime']) * 10000,
                    ($t['stime'] + $t['cstime']) * 10000,
                ];
            }
            if (!\function_exists('getrusage')) {
                return null;
            }
            $cpu = [0, 0];
            foreach ([\getrusage(0), \getrusage(1)] as $r) {
                $cpu[0] += $r['ru_utime.tv_sec'] * 1000000 + $r['ru_utime.tv_usec'];
                $cpu[1] += $r['ru_stime.tv_sec'] * 1000000 + $r['ru_stime.tv_usec'];
            }
            return $cpu;
        }

        /** One line to fpmd on the request's STDERR stream. */
        private static function tell(string $what): void
        {
            $logging = \ini_get('fastcgi.logging');
            if ($logging !== '1') {
                \ini_set('fastcgi.logging', '1');
            }
            \error_log("\x1b[fpmd " . self::$token . ' ' . $what . ']', 4);
            if ($logging !== '1' && $logging !== false) {
                \ini_set('fastcgi.logging', $logging);
            }
        }

        /** php-fpm's fastcgi_finish_request() (sapi/fpm/fpm/fpm_main.c). */
        public static function finish(): bool
        {
            if (self::$token === null || self::$finished) {
                return false;
            }
            self::$finished = true;
            // php_output_end_all(): every output buffer flushed and ended.
            while (\ob_get_level() > 0) {
                if (!@\ob_end_flush()) {
                    break;
                }
            }
            if (\headers_sent()) {
                self::tell('finish');
            } else {
                // php_header(): PHP sends the head with the first byte of
                // the body; fpmd forwards the head and drops that byte.
                self::tell('finish-head');
                echo ' ';
            }
            \flush();
            // What the script prints now goes nowhere. php-fpm's child
            // buffers it (8 KiB, fcgi_write) and, when that overflows,
            // finds the connection closed: without ignore_user_abort()
            // the script stops there, its shutdown functions run
            // (php_handle_aborted_connection).
            \ob_start(static function (string $buffer): string {
                self::$after += \strlen($buffer);
                if (self::$after > 8184 && !\ignore_user_abort()) {
                    exit;
                }
                return '';
            }, 1);
            return true;
        }

        /**
         * php-fpm's fpm_get_status() (fpm_status_export_to_zval in
         * sapi/fpm/fpm/fpm_status.c): the pool's status, read from the
         * pool's status socket, with php-fpm's keys and types; false when
         * it cannot be read.
         */
        public static function status()
        {
            $path = (string) \get_cfg_var('fpmd.status_socket');
            if ($path === '' || !\function_exists('stream_socket_client')) {
                return false;
            }
            $s = @\stream_socket_client('unix://' . $path, $errno, $errstr, 5.0);
            if ($s === false) {
                return false;
            }
            $json = \stream_get_contents($s);
            \fclose($s);
            $v = \is_string($json) ? \json_decode($json, true) : null;
            if (!\is_array($v) || !isset($v['processes']) || !\is_array($v['processes'])) {
                return false;
            }
            $status = [
                'pool' => (string) $v['pool'],
                'process-manager' => (string) $v['process manager'],
                'start-time' => (int) $v['start time'],
                'start-since' => (int) $v['start since'],
                'accepted-conn' => (int) $v['accepted conn'],
                'listen-queue' => (int) $v['listen queue'],
                'max-listen-queue' => (int) $v['max listen queue'],
                'listen-queue-len' => (int) $v['listen queue len'],
                'idle-processes' => (int) $v['idle processes'],
                'active-processes' => (int) $v['active processes'],
                'total-processes' => (int) $v['total processes'],
                'max-active-processes' => (int) $v['max active processes'],
                'max-children-reached' => (int) $v['max children reached'],
                'slow-requests' => (int) $v['slow requests'],
                'procs' => [],
            ];
            foreach ($v['processes'] as $p) {
                $uri = (string) $p['request uri'];
                $query = '';
                if (($q = \strpos($uri, '?')) !== false) {
                    $query = (string) \substr($uri, $q + 1);
                    $uri = (string) \substr($uri, 0, $q);
                }
                $status['procs'][] = [
                    'pid' => (int) $p['pid'],
                    'state' => (string) $p['state'],
                    'start-time' => (int) $p['start time'],
                    'start-since' => (int) $p['start since'],
                    'requests' => (int) $p['requests'],
                    'request-duration' => (int) $p['request duration'],
                    'request-method' => (string) $p['request method'],
                    'request-uri' => $uri,
                    'query-string' => $query,
                    'request-length' => (int) $p['content length'],
                    'user' => (string) $p['user'],
                    'script' => (string) $p['script'],
                    'last-request-cpu' => (float) $p['last request cpu'],
                    'last-request-memory' => (int) $p['last request memory'],
                ];
            }
            return $status;
        }

        /** The last shutdown function: the request's peak memory and CPU. */
        public static function end(): void
        {
            if (self::$token === null) {
                return;
            }
            $memory = \memory_get_peak_usage(true);
            $cpu = '- -';
            $c0 = self::$rusage;
            $c1 = self::cpu();
            if ($c0 !== null && $c1 !== null) {
                $cpu = ($c1[0] - $c0[0]) . ' ' . ($c1[1] - $c0[1]);
            }
            self::tell("end $memory $cpu");
            self::$token = null;
        }
    }
}

namespace {
    if (!\function_exists('fpm_get_status')) {
        /** php-fpm's: the status of the script's pool, as an array. */
        function fpm_get_status(): array|false
        {
            return \Fpmd\Sapi::status();
        }
    }
    if (!\function_exists('fastcgi_finish_request')) {
        /** php-fpm's: the response ends now, the script goes on. */
        function fastcgi_finish_request(): bool
        {
            return \Fpmd\Sapi::finish();
        }
    }
    \Fpmd\Sapi::start();
    if ((string) \get_cfg_var('fpmd.auto_prepend_file') !== '') {
        require \get_cfg_var('fpmd.auto_prepend_file');
    }
}

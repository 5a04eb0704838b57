<?php
// fpmd's part of php-fpm's SAPI for stock php-cgi, run before each script
// as auto_prepend_file (fpmd's src/process/sapi.rs and src/proxy/sapi.rs
// say how it is used).
//
// It talks to fpmd in-band: each message is one line on the request's
// FastCGI STDERR stream, "\x1b[fpmd TOKEN VERB ARGS]", TOKEN being the
// random hex string fpmd gave this request as the first 32 bytes of its
// FPMD_SAPI parameter.
// fpmd removes the lines that carry the request's token before anything
// reaches the web server; any other line (a script printing these bytes
// itself) goes through as the text it is.
//
// No variable is left in the global scope: the pool's own
// auto_prepend_file, included at the end, runs as it would under php-fpm.

namespace Fpmd {
    final class Sapi
    {
        // Static properties start from these values in every request.

        /** @var string|null this request's token, once read (token()) */
        private static $token = null;
        /** @var bool the end report is still to be sent */
        private static $report = false;
        /** @var bool fastcgi_finish_request() was called */
        private static $finished = false;
        /** @var int bytes the script printed after fastcgi_finish_request() */
        private static $after = 0;
        /** @var string " USER SYSTEM": CPU µs when the request started */
        private static $started = '';
        /** @var int|false|null the response code when PHP sent the head; null: not watched, or not sent */
        private static $sentCode = null;
        /** @var bool fpmd wants the code set after the head was sent */
        private static $code = false;

        /**
         * The request starts: its token, and what to report when the
         * script ends. FPMD_SAPI is the token and one byte: "n" when fpmd
         * wants no report, "s" when it wants the figures (the CPU times
         * are taken now and at the end), "c" when it wants the response
         * code if the script changes it after its head was sent (an
         * access log's %s, as php-fpm's), "a" both.
         */
        public static function start(): bool
        {
            $value = \getenv('FPMD_SAPI');
            if (!\is_string($value) || \strlen($value) !== 33) {
                return false;
            }
            $report = $value[32];
            if ($report === 'n') {
                // A shutdown function only for php-fpm's error header.
                $line = \get_cfg_var('fastcgi.error_header');
                if (!\is_string($line) || $line === '') {
                    return true;
                }
            } else {
                self::$token = \substr($value, 0, 32);
                if ($report === 's' || $report === 'a') {
                    self::$report = true;
                    self::$started = ' ' . self::cpu();
                }
                if (($report === 'c' || $report === 'a') && \function_exists('header_register_callback')) {
                    // Called as PHP sends the head; a script that
                    // registers its own callback replaces this one (its
                    // requests then log the code sent).
                    self::$code = true;
                    \header_register_callback([self::class, 'headSent']);
                }
            }
            if (\function_exists('register_shutdown_function')) {
                // The first shutdown function: it runs when the script
                // ends, where php-fpm sets its error header and takes its
                // figures (fpm_main.c: before php_request_shutdown()).
                \register_shutdown_function([self::class, 'end']);
            }
            return true;
        }

        /**
         * php-fpm's lock on the pool's php_admin_value and php_admin_flag
         * (fpm_php.c makes them PHP_INI_SYSTEM in the child): php-cgi
         * applied the script's .user.ini files before this file runs, and
         * to php-cgi an admin value is an ordinary ini value. Each name
         * of fpmd.admin_values (space-separated) whose value is not its
         * -d value (get_cfg_var) is restored to its value at the child's
         * start, the -d value (ini_restore: what a .user.ini set is
         * undone, nothing else changes). One PHP cannot set at run time
         * (PHP_INI_PERDIR: upload_max_filesize, post_max_size,
         * output_buffering; PHP has used it already) keeps the .user.ini's
         * value, and fpmd is told ("admin-changed NAME"; it logs it once
         * per pool and name). A value PHP itself changed at start (an
         * opcache size it rounds) is not the -d value either; PHP's own
         * start value tells it apart, read only then (ini_get_all(),
         * ~25 µs). What the script sets with ini_set() stays unlocked.
         * Cost: one get_cfg_var() without admin values; with them, two
         * calls per name when no .user.ini changed it.
         */
        public static function admin(): void
        {
            $names = \get_cfg_var('fpmd.admin_values');
            if (!\is_string($names) || $names === '') {
                return;
            }
            $all = null;
            foreach (\explode(' ', $names) as $name) {
                $value = \ini_get($name);
                // false: no such entry (its extension is not loaded).
                if ($value === false || $value === \get_cfg_var($name)) {
                    continue;
                }
                if (\function_exists('ini_restore')) {
                    \ini_restore($name);
                    if (\ini_get($name) === \get_cfg_var($name)) {
                        continue;
                    }
                }
                if (\function_exists('ini_get_all')) {
                    $all ??= \ini_get_all(null, true);
                    $entry = $all[$name] ?? null;
                    if (\is_array($entry) && $entry['local_value'] === $entry['global_value']) {
                        // Its start value: this request did not change it.
                        continue;
                    }
                }
                if (self::token() !== null) {
                    self::tell('admin-changed ' . $name);
                }
            }
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
         * "USER SYSTEM": CPU µs this process and the children it waited
         * for have used since it started, as php-fpm reads them: times(),
         * in clock ticks (USER_HZ, 100 a second on Linux), tms_utime +
         * tms_cutime and tms_stime + tms_cstime (fpm_request.c); fpmd
         * takes the difference between the start and the end. One call; getrusage()
         * (two) where posix is not loaded; "- -" without either.
         */
        private static function cpu(): string
        {
            if (\function_exists('posix_times')) {
                $t = \posix_times();
                return (($t['utime'] + $t['cutime']) * 10000) . ' '
                    . (($t['stime'] + $t['cstime']) * 10000);
            }
            if (!\function_exists('getrusage')) {
                return '- -';
            }
            $user = $system = 0;
            foreach ([\getrusage(0), \getrusage(1)] as $r) {
                $user += $r['ru_utime.tv_sec'] * 1000000 + $r['ru_utime.tv_usec'];
                $system += $r['ru_stime.tv_sec'] * 1000000 + $r['ru_stime.tv_usec'];
            }
            return $user . ' ' . $system;
        }

        /**
         * This request's token (the first 32 bytes of FPMD_SAPI), read
         * when first needed; null without fpmd.
         */
        private static function token(): ?string
        {
            if (self::$token === null) {
                $value = \getenv('FPMD_SAPI');
                if (\is_string($value) && \strlen($value) === 33) {
                    self::$token = \substr($value, 0, 32);
                }
            }
            return self::$token;
        }

        /** One line to fpmd on the request's STDERR stream. */
        private static function tell(string $what): void
        {
            $logging = \ini_get('fastcgi.logging');
            if ($logging !== '1') {
                \ini_set('fastcgi.logging', '1');
            }
            \error_log("\x1b[fpmd " . self::token() . ' ' . $what . ']', 4);
            if ($logging !== '1' && $logging !== false) {
                \ini_set('fastcgi.logging', $logging);
            }
        }

        /** php-fpm's fastcgi_finish_request() (sapi/fpm/fpm/fpm_main.c). */
        public static function finish(): bool
        {
            if (self::$finished || self::token() === null) {
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
            if ($path === '') {
                // A child of a shared php-cgi parent (pm.spawn = "shared").
                $path = (string) \getenv('FPMD_STATUS_SOCKET', true);
            }
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

        /** The head goes out now: the code it carries. */
        public static function headSent(): void
        {
            self::$sentCode = \http_response_code();
        }

        /**
         * The first shutdown function: php-fpm's error header; "status
         * CODE" when the script set a response code after its head went
         * out (php-fpm's %s logs that last one); then the report "end
         * MEMORY USER SYSTEM USER0 SYSTEM0": the request's peak memory in
         * bytes and the CPU times now and at the start, in µs.
         */
        public static function end(): void
        {
            self::errorHeader();
            if (self::$code && self::$sentCode !== null) {
                $code = \http_response_code();
                if (\is_int($code) && $code !== self::$sentCode) {
                    self::tell('status ' . $code);
                }
            }
            if (self::$report) {
                self::$report = false;
                self::tell('end ' . \memory_get_peak_usage(true) . ' ' . self::cpu() . self::$started);
            }
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
    \Fpmd\Sapi::admin();
    if ((string) \get_cfg_var('fpmd.auto_prepend_file') !== '') {
        require \get_cfg_var('fpmd.auto_prepend_file');
    }
}

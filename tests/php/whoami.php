<?php
// "<user> <group> <supplementary group names, comma separated>" of the effective ids.
header('Content-Type: text/plain');
$u = posix_getpwuid(posix_geteuid());
$g = posix_getgrgid(posix_getegid());
$groups = array_map(function ($gid) { $gr = posix_getgrgid($gid); return $gr ? $gr['name'] : (string)$gid; }, posix_getgroups());
echo $u['name'], " ", $g['name'], " ", implode(',', $groups);

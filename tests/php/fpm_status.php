<?php
// fpm_status.php: the shape of fpm_get_status(): each key with its type,
// the first process row's too, as JSON; and this child's own row's state.
header('Content-Type: application/json');
$s = fpm_get_status();
if (!is_array($s)) {
    echo json_encode(['result' => gettype($s)]);
    return;
}
$shape = [];
foreach ($s as $k => $v) {
    $shape[$k] = gettype($v);
}
$rows = [];
foreach ($s['procs'] as $p) {
    $row = [];
    foreach ($p as $k => $v) {
        $row[$k] = gettype($v);
    }
    $rows[] = $row;
}
$mine = array_values(array_filter($s['procs'], fn ($p) => $p['pid'] === getmypid()));
echo json_encode([
    'shape' => $shape,
    'row' => $rows[0] ?? null,
    'rows' => count($rows),
    'pool' => $s['pool'],
    'pm' => $s['process-manager'],
    'mine' => $mine[0]['state'] ?? null,
    'uri' => $mine[0]['request-uri'] ?? null,
    'query' => $mine[0]['query-string'] ?? null,
]);

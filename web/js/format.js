/*
 * Number, byte, duration and time formatting for the dashboard. Pure functions; every one
 * answers "—" (or "0") for a value that is missing or not a finite number.
 */

export function isNum(v) {
    return typeof v === 'number' && Number.isFinite(v);
}

export function fmtInt(v) {
    return isNum(v) ? Math.round(v).toLocaleString('en-US') : '—';
}

export function fmtNum(v, digits) {
    if (!isNum(v)) return '—';
    const a = Math.abs(v);
    if (a !== 0 && (a < 1e-3 || a >= 1e6)) return v.toExponential(2);
    return v.toLocaleString('en-US', {
        minimumFractionDigits: 0, maximumFractionDigits: digits === undefined ? 4 : digits,
    });
}

export function fmtRate(v) {
    if (!isNum(v)) return '—';
    return v >= 100 ? fmtInt(v) : fmtNum(v, 1);
}

export function fmtBytes(b) {
    if (!isNum(b)) return '—';
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let v = b;
    let u = 0;
    while (v >= 1024 && u < units.length - 1) {
        v /= 1024;
        u++;
    }
    return (u === 0 ? String(v) : v.toFixed(v >= 100 ? 0 : 1)) + ' ' + units[u];
}

export function fmtDuration(sec) {
    if (!isNum(sec) || sec < 0) return '—';
    if (sec < 10) return sec.toFixed(1) + ' s';
    if (sec < 60) return Math.round(sec) + ' s';
    const s = Math.round(sec);
    if (s < 3600) return Math.floor(s / 60) + ' m ' + String(s % 60).padStart(2, '0') + ' s';
    if (s < 86400) {
        return Math.floor(s / 3600) + ' h ' + String(Math.floor(s / 60) % 60).padStart(2, '0') +
            ' m';
    }
    return Math.floor(s / 86400) + ' d ' + Math.floor(s / 3600) % 24 + ' h';
}

/* Axis ticks: 1.5M, 12.5k, 0.25. */
export function fmtCompact(v) {
    const a = Math.abs(v);
    if (a >= 1e6) return +(v / 1e6).toFixed(2) + 'M';
    if (a >= 1e4) return +(v / 1e3).toFixed(1) + 'k';
    return String(+v.toFixed(6));
}

/* A duration in seconds at chart precision: µs, ms or s. */
export function fmtSeconds(v) {
    if (v === 0) return '0';
    if (Math.abs(v) < 1e-3) return +(v * 1e6).toFixed(1) + ' µs';
    if (Math.abs(v) < 1) return +(v * 1e3).toFixed(2) + ' ms';
    return +v.toFixed(2) + ' s';
}

/* An RFC 3339 time from the API as milliseconds since the epoch, or null. */
export function parseTime(iso) {
    if (!iso) return null;
    const t = Date.parse(iso);
    return Number.isNaN(t) ? null : t;
}

/* A wall-clock time: "HH:MM:SS" today, "YYYY-MM-DD HH:MM:SS" on another day. */
export function fmtClock(ms) {
    if (ms === null) return '—';
    const d = new Date(ms);
    const today = new Date();
    const time = d.toLocaleTimeString('en-GB', {hour12: false});
    if (d.toDateString() === today.toDateString()) return time;
    return d.toISOString().slice(0, 10) + ' ' + time;
}

"""Server state in Redis: segment announcements, low-watermarks and the broker-side follower."""

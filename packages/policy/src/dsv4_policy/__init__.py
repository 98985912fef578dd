"""dsv4-policy: declarative launch tables with an unchanged fallback to upstream."""

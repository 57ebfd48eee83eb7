-- pgmsg 016 down: the Kafka groups' tables go (the groups' cursors stay).
DROP INDEX {{schema}}.consumer_group_group_name;
DROP TABLE {{schema}}.kafka_offset;
DROP TABLE {{schema}}.kafka_group_member;
DROP TABLE {{schema}}.kafka_group;

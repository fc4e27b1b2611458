package weir.compat;

import org.apache.kafka.clients.admin.Admin;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;

/**
 * A test class with one node of default settings and an admin client on
 * it, started before its first test and killed after its last (test
 * classes run one after another).
 */
abstract class OneNode {
    static WeirNode node;
    static Admin admin;

    @BeforeAll
    static void startNode() throws Exception {
        node = WeirNode.start();
        admin = Admin.create(node.props());
    }

    @AfterAll
    static void stopNode() throws Exception {
        admin.close();
        node.close();
    }
}
